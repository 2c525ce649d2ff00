"""The seed VAEs on the CPU: one clip encoded and decoded with PyTorch's own kernel choice and through oneDNN.

At batch 1 PyTorch sends most of the Wan VAE's causal 3-D convolutions to its reference kernel
(`worldtune.models.cpu_conv3d` says why); worldtune's loaded VAEs call oneDNN for them instead. For each seed
model's VAE at the demo's clip size (one 17-frame 128x224 grid clip, fp32, what `worldtune demo` encodes in its
cache stage and decodes per generated video): seconds per encode and decode, median of --runs after a warm-up, both
ways in the same process, and the largest difference of the latents and of the decoded pixels (values in [-1, 1]).

    python benchmarks/cpu_vae_bench.py            # both seeds; writes benchmarks/results/cpu_vae_bench.json
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from datetime import date
from pathlib import Path

import torch

from worldtune.models.build import build_pipeline
from worldtune.models.cpu_conv3d import route_conv3d_to_onednn
from worldtune.models.registry import get_spec
from worldtune.models.seeds import load_seed_weights


def seed_vae(name: str):
    """The seed's shipped VAE, as diffusers builds it (no worldtune routing)."""
    pipe = build_pipeline(get_spec(name), seed=0)
    load_seed_weights(pipe, name)
    return pipe.vae.float().eval()


def timed(fn, runs: int) -> tuple[float, torch.Tensor]:
    out = fn()  # warm-up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench(name: str, frames: int, height: int, width: int, runs: int) -> dict:
    plain = seed_vae(name)
    routed = route_conv3d_to_onednn(copy.deepcopy(plain))
    x = torch.rand(1, 3, frames, height, width, generator=torch.Generator().manual_seed(0)) * 2 - 1
    row: dict = {"seed": name}
    with torch.no_grad():
        for label, vae in (("pytorch", plain), ("onednn", routed)):
            enc_s, z = timed(lambda: vae.encode(x).latent_dist.mode(), runs)
            dec_s, y = timed(lambda: vae.decode(z).sample, runs)
            row[label] = {"encode_s": round(enc_s, 3), "decode_s": round(dec_s, 3), "z": z, "y": y}
    p, o = row["pytorch"], row["onednn"]
    row["max_abs_diff_latents"] = float((p.pop("z") - o.pop("z")).abs().max())
    row["max_abs_diff_pixels"] = float((p.pop("y") - o.pop("y")).abs().max())
    row["speedup_round_trip"] = round((p["encode_s"] + p["decode_s"]) / (o["encode_s"] + o["decode_s"]), 2)
    return row


def cpu_name() -> str:
    """The processor's model name (Linux), else what `platform` knows."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", default=["seed-predict2.5", "seed-cosmos3"])
    ap.add_argument("--frames", type=int, default=17)
    ap.add_argument("--height", type=int, default=128)
    ap.add_argument("--width", type=int, default=224)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default="benchmarks/results/cpu_vae_bench.json")
    args = ap.parse_args()
    rows = []
    for name in args.seeds:
        rows.append(bench(name, args.frames, args.height, args.width, args.runs))
        print(json.dumps(rows[-1]))
    result = {"date": date.today().isoformat(), "machine": f"{cpu_name()}, {torch.get_num_threads()} threads", "torch": torch.__version__,
              "clip": [args.frames, args.height, args.width], "runs": args.runs, "results": rows}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
