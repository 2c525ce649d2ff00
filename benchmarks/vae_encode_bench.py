"""VAE encode speed for `worldtune cache`: the Wan2.1 VAE run eager, compiled, channels-last and tiled.

Builds the real-size Wan2.1 VAE of Cosmos-Predict2.5 (the same AutoencoderKLWan class and config
as worldtune's registry, random-initialised) and encodes one 93x432x768 clip (a synthetic scene:
gradient, moving squares, film grain) in bf16 with every mode of `worldtune.models.vae_modes`:

  eager          the module as diffusers builds it (the reference)
  compile        the encoder under torch.compile
  channels_last  weights in channels-last 3D
  tiled          diffusers' spatial tiling (enable_tiling)

For each mode: seconds per clip (warm-up encodes first, CUDA synchronised, median of --runs),
peak GPU memory, and the max abs and relative L2 difference of its latents from eager bf16's.
The noise floor is eager bf16 against eager fp32 on the same input: a mode is *accepted* when its
relative L2 difference from eager bf16 is at most the floor's (its error is no larger than what
running in bf16 already costs). `chosen` is the fastest accepted mode: set it as `CUDA_MODE` in
src/worldtune/models/vae_modes.py (what `cache.vae_mode = "auto"` runs on CUDA).

Then the cache throughput on one device: a small prepared dataset of --clips synthetic clips at
the same shape is written as mp4s and encoded through the cache's own code path
(`worldtune.data.cache.row_encoder` + `encode_clips` + `ShardWriter`, exactly what `worldtune
cache` runs per process, minus the text encoder), with eager and with the chosen mode: clips/s,
and the share of it spent decoding the mp4s.

    python benchmarks/vae_encode_bench.py            # CUDA, real size: 93x432x768 bf16
    python benchmarks/vae_encode_bench.py --tiny     # CPU smoke test: tiny VAE, 5x32x48

Needs torch, diffusers and worldtune importable (`pip install -e .`, or PYTHONPATH=src with torch
and diffusers installed); the cache-throughput part also needs PyAV (`av`) and pyarrow and is
skipped, with the reason in the JSON, when they are missing. Writes
benchmarks/results/vae_encode_bench.json (or --json).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # run from a checkout without installing

from worldtune.models.vae_modes import VAE_MODES, apply_vae_mode  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny VAE and clip (CPU smoke test)")
    p.add_argument("--frames", type=int, default=None, help="default 93 (tiny: 5)")
    p.add_argument("--height", type=int, default=None, help="default 432 (tiny: 32)")
    p.add_argument("--width", type=int, default=None, help="default 768 (tiny: 48)")
    p.add_argument("--modes", default=",".join(VAE_MODES))
    p.add_argument("--warmup", type=int, default=None, help="untimed encodes per mode (default 2, tiny 1)")
    p.add_argument("--runs", type=int, default=None, help="timed encodes per mode, median reported (default 5, tiny 2)")
    p.add_argument("--clips", type=int, default=None, help="clips of the cache-throughput dataset (default 8, tiny 3)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "vae_encode_bench.json"))
    a = p.parse_args()
    a.frames = a.frames or (5 if a.tiny else 93)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.tiny else 2)
    a.runs = a.runs or (2 if a.tiny else 5)
    a.height = a.height or (32 if a.tiny else 432)
    a.width = a.width or (48 if a.tiny else 768)
    a.clips = a.clips or (3 if a.tiny else 8)
    return a


def synthetic_clip(frames: int, height: int, width: int, seed: int) -> np.ndarray:
    """uint8 [T, H, W, 3]: a colour gradient, three moving squares and mild grain (VAE-like content)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([xx / width * 200 + 30, yy / height * 200 + 30, np.full_like(xx, 110)], -1)
    side = max(4, height // 8)
    squares = [(rng.integers(0, height - side), rng.integers(0, width - side), rng.integers(-3, 4),
                rng.integers(1, 5), rng.integers(40, 255, 3)) for _ in range(3)]
    out = np.empty((frames, height, width, 3), np.uint8)
    for t in range(frames):
        img = base.copy()
        for y0, x0, vy, vx, colour in squares:
            y, x = (y0 + vy * t) % (height - side), (x0 + vx * t) % (width - side)
            img[y:y + side, x:x + side] = colour
        img += rng.normal(0, 4, img.shape).astype(np.float32)
        out[t] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def make_vae(spec, state: dict, device: str, dtype: torch.dtype, mode: str):
    """A fresh VAE with the shared random weights, on `device` in `dtype`, switched to `mode`."""
    from worldtune.models.build import build_vae

    vae = build_vae(spec)
    vae.load_state_dict(state)
    vae = vae.to(device=device, dtype=dtype).eval()
    return apply_vae_mode(vae, mode)


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_encode(vae, pixels: torch.Tensor, device: str, warmup: int, runs: int) -> tuple[torch.Tensor, list[float]]:
    """(latents of the last run, seconds of each timed run)."""
    from worldtune.models.latents import encode

    for _ in range(warmup):
        encode(vae, pixels)
    times, lat = [], None
    for _ in range(runs):
        sync(device)
        t0 = time.perf_counter()
        lat = encode(vae, pixels)
        sync(device)
        times.append(time.perf_counter() - t0)
    return lat, times


def difference(a: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    a, ref = a.double().cpu(), ref.double().cpu()
    return {"max_abs": float((a - ref).abs().max()), "rel_l2": float((a - ref).norm() / ref.norm().clamp_min(1e-12))}


def bench_modes(args, spec, state: dict, pixels: torch.Tensor) -> dict:
    """Every mode timed and compared with eager bf16; the fp32 eager run gives the noise floor."""
    dev = args.device
    low = torch.bfloat16
    results: dict = {}
    fp32_vae = make_vae(spec, state, dev, torch.float32, "eager")
    ref32, t32 = time_encode(fp32_vae, pixels, dev, 1, max(1, args.runs // 2))
    del fp32_vae
    eager = None
    for mode in ["eager"] + [m for m in args.modes.split(",") if m != "eager"]:
        if torch.device(dev).type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        try:
            vae = make_vae(spec, state, dev, low, mode)
            t0 = time.perf_counter()
            lat, times = time_encode(vae, pixels, dev, args.warmup, args.runs)
            first = time.perf_counter() - t0 - sum(times)
        except Exception as e:  # a mode that does not run here (compile without a compiler) is reported, not fatal
            results[mode] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                             "accepted": False}
            print(f"{mode:14s} failed: {results[mode]['error']}")
            continue
        del vae
        if eager is None:
            eager = lat
        r = {"s_per_clip": statistics.median(times), "runs_s": [round(t, 4) for t in times],
             "warmup_s": round(first, 3), **{f"vs_eager_{k}": v for k, v in difference(lat, eager).items()}}
        if torch.device(dev).type == "cuda":
            r["peak_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
        results[mode] = r
        print(f"{mode:14s} {r['s_per_clip']:.4f} s/clip  rel_l2 vs eager {r['vs_eager_rel_l2']:.2e}  "
              f"max_abs {r['vs_eager_max_abs']:.2e}")
    floor = difference(eager, ref32)
    for r in results.values():
        if "error" not in r:
            r["accepted"] = r["vs_eager_rel_l2"] <= floor["rel_l2"]
    ok = {m: r["s_per_clip"] for m, r in results.items() if r["accepted"]}
    chosen = min(ok, key=ok.get)
    print(f"noise floor (eager bf16 vs fp32): rel_l2 {floor['rel_l2']:.2e}, max_abs {floor['max_abs']:.2e}; "
          f"fp32 eager {statistics.median(t32):.4f} s/clip; chosen: {chosen}")
    return {"modes": results, "noise_floor_bf16_vs_fp32": floor, "fp32_eager_s_per_clip": statistics.median(t32),
            "chosen": chosen, "speedup_chosen_vs_eager": results["eager"]["s_per_clip"] / ok[chosen]}


def write_dataset(root: Path, args) -> tuple[dict, list[dict]]:
    """A prepared dataset folder (info.json, manifest.parquet, clips/*.mp4) of synthetic clips."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from worldtune.data.video import write_video

    rows = []
    for i in range(args.clips):
        cid = f"clip{i:04d}"
        write_video(root / "clips" / f"{cid}.mp4", synthetic_clip(args.frames, args.height, args.width, 100 + i), 16,
                    preset="ultrafast")
        rows.append({"clip_id": cid, "video": f"clips/{cid}.mp4", "views": None, "prompt": "p", "split": "train"})
    pq.write_table(pa.Table.from_pylist(rows), root / "manifest.parquet")
    info = {"format": "worldtune.dataset", "version": 1, "layout": {"type": "single"}, "height": args.height,
            "width": args.width, "num_frames": args.frames}
    (root / "info.json").write_text(json.dumps(info))
    return info, rows


def bench_cache(args, spec, state: dict, modes: list[str]) -> dict:
    """clips/s of the cache's latent stage on one device, per mode, and the mp4 decode share."""
    try:
        import av  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as e:
        return {"skipped": f"needs {e.name} (pip install av pyarrow)"}
    from worldtune.data.cache import ShardWriter, encode_clips, row_encoder
    from worldtune.data.dataset import read_clip_frames

    out: dict = {"clips": args.clips}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "dataset"
        info, rows = write_dataset(root, args)
        t0 = time.perf_counter()
        for r in rows:
            read_clip_frames(root, r)
        out["decode_s_per_clip"] = (time.perf_counter() - t0) / len(rows)
        for mode in dict.fromkeys(modes):
            vae = make_vae(spec, state, args.device, torch.bfloat16 if args.device != "cpu" else torch.float32, mode)
            encode_row, _, _ = row_encoder(root, info, vae)
            encode_row(rows[0])  # warm-up (compilation, cuDNN autotuning), as the first clip of a run pays it
            shards = Path(tmp) / f"cache-{mode}"
            shards.mkdir()
            sync(args.device)
            t0 = time.perf_counter()
            done = encode_clips(rows, encode_row, ShardWriter(shards, 0, torch.bfloat16), batch_size=4)
            sync(args.device)
            sec = time.perf_counter() - t0
            assert done.clips == len(rows) and not done.failed, done.failed
            out[mode] = {"clips_per_s": len(rows) / sec, "s_per_clip": sec / len(rows)}
            print(f"cache {mode:14s} {len(rows) / sec:.3f} clips/s ({sec / len(rows):.3f} s/clip, "
                  f"{out['decode_s_per_clip']:.3f} of it mp4 decode)")
            del vae
    return out


def main() -> None:
    args = parse()
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.set_verbosity_error()  # one warning per VAE built about fp32 modules it does not have
    from worldtune.models.build import build_vae
    from worldtune.models.registry import get_spec

    spec = get_spec("tiny-predict2.5" if args.tiny else "cosmos-predict2.5-2b")
    torch.manual_seed(args.seed)
    state = build_vae(spec).state_dict()
    from worldtune.models.latents import frames_to_pixels

    pixels = frames_to_pixels(synthetic_clip(args.frames, args.height, args.width, args.seed)).unsqueeze(0)
    if args.device == "cpu":
        print("no CUDA: timings on the CPU are a smoke test, not a measurement")
    modes = bench_modes(args, spec, state, pixels)
    cache = bench_cache(args, spec, state, ["eager", modes["chosen"]])
    result = {
        "benchmark": "vae_encode_bench", "spec": spec.name, "shape": [args.frames, args.height, args.width],
        "device": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else platform.processor() or "cpu",
        "torch": torch.__version__, "diffusers": __import__("diffusers").__version__,
        "date": time.strftime("%Y-%m-%d"), "warmup": args.warmup, "runs": args.runs,
        "command": " ".join(["python", "benchmarks/vae_encode_bench.py", *sys.argv[1:]]),
        **modes, "cache": cache,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
