"""Ship a decoder trained further (`worldtune autoencoder --autoencoder.train_part decoder`) as a seed model's VAE.

The run's exported VAE (`RUN/vae`) replaces the seed's `vae.safetensors` (fp16, as every seed file), after checking
that its encoder side is the shipped one bit for bit at fp16 (a decoder run must not move a latent the transformer
learned on). `seed.json` gains the run under `autoencoder.decoder_runs`: the command, data, machine, steps, seconds,
the held-out PSNR before and after (whole clips and per latent chunk) and the curves.

    python benchmarks/seed_pack_decoder.py seed-predict2.5 /tmp/dec_sp --data "..." --machine "..." \
        --command "worldtune autoencoder ..."
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from worldtune.atomic import atomic_write_json
from worldtune.models.seeds import SEEDS_DIR

DECODER_SIDE = ("decoder.", "post_quant_conv.")


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def pack(name: str, run: Path, record: dict, snapshot: Path | None = None) -> dict:
    seed = SEEDS_DIR / name
    shipped = load_file(str(seed / "vae.safetensors"))
    weights = snapshot or run / "vae" / "diffusion_pytorch_model.safetensors"
    trained = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(weights)).items()}
    if shipped.keys() != trained.keys():
        raise SystemExit(f"{run}/vae: not the {name} VAE's tensors")
    moved = [k for k in shipped if not k.startswith(DECODER_SIDE) and not torch.equal(shipped[k], trained[k])]
    if moved:
        raise SystemExit(f"{run}: the encoder side changed ({moved[:3]}...): not a decoder-only run")
    rows = _rows(run)
    val = [r for r in rows if "val_psnr_chunks" in r]
    if snapshot:  # the newest checkpoint of a run cut short: its figures are the last validation's
        val = [r for r in val if r["step"] <= record["steps"]]
        rows = [r for r in rows if r["step"] <= record["steps"]]
        summary = {"steps": record["steps"], "seconds": None, "val_psnr": val[-1]["val_psnr"]}
    else:
        summary = json.loads((run / "run.json").read_text())["summary"]
    record = {**record, "steps": summary["steps"], "seconds": summary["seconds"],
              "held_out_psnr_db": round(summary["val_psnr"], 3), "chunk_psnr_db": val[-1]["val_psnr_chunks"],
              "psnr_curve": [[r["step"], round(r["val_psnr"], 3), r["val_psnr_chunks"]] for r in val],
              "loss_curve": [[r["step"], round(r["loss"], 4)] for r in rows if "loss" in r][::5]}
    manifest = json.loads((seed / "seed.json").read_text())
    ae = manifest["autoencoder"]
    ae["decoder_runs"] = [*([ae.pop("decoder")] if "decoder" in ae else []), *ae.get("decoder_runs", []), record]
    tmp = seed / ".vae.safetensors.tmp"
    save_file(trained, str(tmp))
    tmp.replace(seed / "vae.safetensors")
    atomic_write_json(seed / "seed.json", manifest)
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("run", type=Path, help="the decoder run's folder (with vae/, run.json, metrics.jsonl)")
    ap.add_argument("--snapshot", type=Path, help="weights of the run's newest checkpoint, where its time ran out "
                    "before the export (as benchmarks/seed_decoder_device.sh brings them back)")
    ap.add_argument("--step", type=int, help="the snapshot's step (needed with --snapshot)")
    ap.add_argument("--command", required=True, help="the command that trained it")
    ap.add_argument("--data", required=True, help="what it trained on")
    ap.add_argument("--machine", required=True, help="where and when")
    ap.add_argument("--before", type=Path, help="JSON with the shipped VAE's held_out_psnr_db / chunk_psnr_db, "
                    "measured on the same held-out clips")
    args = ap.parse_args()
    record = {"from": "the shipped VAE; encoder, its quant convolution and the latent statistics frozen (bit-identical "
                      "at fp16), so the transformer's latents are unchanged",
              "command": args.command, "data": args.data, "machine": args.machine}
    if args.before:
        before = json.loads(args.before.read_text())
        record["held_out_psnr_db_before"] = before["held_out_psnr_db"]
        record["chunk_psnr_db_before"] = before["chunk_psnr_db"]
    if args.snapshot:
        if args.step is None:
            raise SystemExit("--snapshot needs --step: the checkpoint's step")
        record["steps"] = args.step
    out = pack(args.name, args.run, record, args.snapshot)
    print(json.dumps({k: out[k] for k in ("steps", "held_out_psnr_db", "chunk_psnr_db")}))


if __name__ == "__main__":
    main()
