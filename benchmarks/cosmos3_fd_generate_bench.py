"""One chunk of Cosmos 3 forward-dynamics generation: what `worldtune serve` spends per `step`.

Builds a random-initialised `cosmos3-edge` from the registry (bf16 transformer with its `time_embedder` in
fp32, as `from_pretrained(torch_dtype=bfloat16)` keeps it; the Wan2.2 VAE in bf16) and times
`worldtune.infer.dynamics.forward_dynamics` — the plain `Cosmos3OmniPipeline.__call__` with a
`CosmosActionCondition("forward_dynamics")`, eager, no compilation, as the server runs it — on one first
frame (default 480x832, NVIDIA's DROID forward-dynamics shape at tier 480) and one chunk of 16 DROID actions
(10-D, `droid_lerobot`), at 15 fps, for every (steps, guidance) pair asked for. Random weights make the
frames meaningless but the work the same as a trained model's.

Each pair is warmed up by one 1-step call, then timed `--repeats` times. Reported per pair: seconds per
chunk (median and min), generated frames per second (K / median), transformer calls and their total time,
VAE encode and decode time, peak GPU memory.

    python benchmarks/cosmos3_fd_generate_bench.py --json fd_bench.json             # real size on CUDA
    python benchmarks/cosmos3_fd_generate_bench.py --tiny --json /tmp/fd_bench.json # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosmos3_bench import sync, timed  # noqa: E402

TASK = "Pick up the red cube and put it in the blue bowl."


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny-cosmos3 (CPU smoke test)")
    p.add_argument("--height", type=int, default=None, help="first frame height; default 480 (tiny: 64)")
    p.add_argument("--width", type=int, default=None, help="first frame width; default 832 (tiny: 112)")
    p.add_argument("--chunk", type=int, default=None, help="actions per chunk, a multiple of 4; default 16 (tiny: 4)")
    p.add_argument("--steps", default=None, help="comma-separated step counts; default 35,20 (tiny: 2,1)")
    p.add_argument("--guidance", default="6.0,1.0", help="comma-separated guidance scales (1.0 = no guidance branch)")
    p.add_argument("--tier", type=int, default=None, help="resolution tier; default 480 (tiny: 256)")
    p.add_argument("--fps", type=float, default=15.0)
    p.add_argument("--repeats", type=int, default=None, help="timed calls per pair; default 3 (tiny: 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default="cosmos3_fd_generate_bench.json", help="where to write the results")
    args = p.parse_args()
    for name, real, tiny in (("height", 480, 64), ("width", 832, 112), ("chunk", 16, 4), ("steps", "35,20", "2,1"),
                             ("tier", 480, 256), ("repeats", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else real)
    args.steps = [int(s) for s in str(args.steps).split(",") if s]
    args.guidance = [float(g) for g in str(args.guidance).split(",") if g]
    return args


def build(args, device: torch.device):
    from worldtune.models.family import family_of
    from worldtune.models.registry import get_spec

    spec = get_spec("tiny-cosmos3" if args.tiny else "cosmos3-edge")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(args.seed)
    pipe = family_of(spec).build_pipeline(str(device), dtype)
    for name in getattr(pipe.transformer, "_keep_in_fp32_modules", None) or ():
        getattr(pipe.transformer, name).float()
    pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return spec, pipe


def inputs(args) -> tuple[np.ndarray, np.ndarray]:
    """A smooth random first frame and a smooth random 10-D action chunk in [-1, 1]."""
    import cv2

    rng = np.random.default_rng(args.seed)
    small = rng.integers(0, 255, (args.height // 16 + 1, args.width // 16 + 1, 3)).astype(np.uint8)
    frame = cv2.resize(small, (args.width, args.height), interpolation=cv2.INTER_LINEAR)
    t = np.arange(args.chunk, dtype=np.float32)[:, None]
    actions = np.tanh(0.3 * np.sin(t / 4 + rng.uniform(0, 6, 10).astype(np.float32))).astype(np.float32)
    return frame, actions


def bench_pair(pipe, args, device, frame, actions, steps: int, guidance: float) -> dict:
    from worldtune.infer.dynamics import forward_dynamics
    from worldtune.models.cosmos3_domains import ActionDomain

    domain = ActionDomain("droid_lerobot", 8, 10, new=False)
    kw = dict(guidance=guidance, tier=args.tier, view_point="ego_view", fps=args.fps)
    forward_dynamics(pipe, frame, actions, domain, TASK, seed=args.seed, steps=1, **kw)  # warm-up
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    walls, calls, enc, dec = [], [], [], []
    video = None
    for _ in range(args.repeats):
        step_calls: list[float] = []
        with timed(pipe.transformer, "forward", step_calls, device), \
                timed(pipe.vae, "encode", enc, device), timed(pipe.vae, "decode", dec, device):
            sync(device)
            t0 = time.perf_counter()
            video = forward_dynamics(pipe, frame, actions, domain, TASK, seed=args.seed, steps=steps, **kw)
            sync(device)
            walls.append(time.perf_counter() - t0)
        calls.append(step_calls)
    med = statistics.median(walls)
    return {"steps": steps, "guidance": guidance, "seconds_per_chunk": round(med, 3),
            "seconds_per_chunk_min": round(min(walls), 3), "frames_per_second": round(args.chunk / med, 2),
            "transformer_calls": len(calls[0]), "transformer_s": round(statistics.median(sum(c) for c in calls), 3),
            "vae_encode_s": round(statistics.median(enc), 3), "vae_decode_s": round(statistics.median(dec), 3),
            "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
            "output_shape": list(video.shape)}


def main() -> None:
    import diffusers

    args = parse()
    device = torch.device(args.device)
    spec, pipe = build(args, device)
    frame, actions = inputs(args)
    rows = []
    for steps in args.steps:
        for guidance in args.guidance:
            row = bench_pair(pipe, args, device, frame, actions, steps, guidance)
            rows.append(row)
            print(f"{spec.name} forward dynamics {args.height}x{args.width}, {args.chunk} actions, {steps} steps, "
                  f"guidance {guidance:g}: {row['seconds_per_chunk']:.3f} s/chunk ({row['frames_per_second']} frames/s), "
                  f"{row['transformer_calls']} transformer calls {row['transformer_s']:.3f} s, VAE encode "
                  f"{row['vae_encode_s']:.3f} s decode {row['vae_decode_s']:.3f} s" + (f", peak {row['peak_gib']} GiB" if row["peak_gib"] is not None else ""),
                  flush=True)
    meta = {"spec": spec.name, "mode": "forward_dynamics", "domain": "droid_lerobot", "height": args.height,
            "width": args.width, "chunk": args.chunk, "tier": args.tier, "fps": args.fps, "repeats": args.repeats,
            "seed": args.seed, "compiled": False,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "diffusers": diffusers.__version__, "date": time.strftime("%Y-%m-%d %H:%M %Z")}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
