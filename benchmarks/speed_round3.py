"""Speed, round 3: per goal, the plain path's seconds and worldtune's, their ratio, a noise floor and output equality.

Goals (`--goals`, any of them, in this order):

  gen        Cosmos 3 Edge image2world, 93x480x832, 20 steps, guidance 6, `--videos` videos of different first
             frames. Baseline: the plain `Cosmos3OmniPipeline.__call__` per video (float frames; their uint8
             conversion on the host is not counted). worldtune: what `worldtune generate` runs on CUDA by default
             (compiled repeated blocks, cuDNN's kernel search, each video decoded to uint8 on its own CUDA stream while
             the next one samples: `generate.overlap_decode`); `--compile-vae` adds the compiled VAE decoder.
             Seconds per video = the timed videos' wall time / their count. Noise floor: the plain call with SDPA pinned
             to another correct kernel (cuDNN on CUDA, math on the CPU) against the plain call.
  fd_chunk   one forward-dynamics chunk, what `worldtune serve` runs per policy step: 480x832 first frame, 16 DROID
             actions, 35 steps, for each `--fd-guidance`. Baseline: the plain `forward_dynamics` call (the pipeline's
             `__call__`). worldtune: serve's sampler (models/cosmos3_rollout.py: fixed buffers, CUDA graphs on CUDA,
             `--fd-compile` adds compiled decoder layers), one chunk alone and `--fd-batch` rollouts at once
             (seconds per chunk = the batch's wall time / its size). Noise floor as for `gen`.
  fd_train   forward-dynamics LoRA training step (benchmarks/cosmos3_fd_bench.py): eager with one clip per step vs
             compiled with several (`--fd-train-batch`); time per clip and MFU.
  lora       Cosmos 3 Edge LoRA step, 93x480x832 (benchmarks/cosmos3_bench.py's training): eager vs compiled; MFU;
             peak memory against the memory planner's prediction (models/memory.py `plan`).
  predict25  Predict2.5 2B LoRA step, 93x432x768 (benchmarks/train_bench.py): the diffusers example (`A_example`)
             vs worldtune's best (`B_best`).

`--fp8` (gen, fd_chunk) times worldtune's path once more with the repeated blocks' linears in float8 (torchao
through models/float8.py, `generate.fp8` / `serve.fp8`), after the bf16 figures: a labelled option whose frames are
read against the plain path's and worldtune's bf16 ones, not against the noise floor.

Equality (gen, fd_chunk): max and mean absolute difference of the uint8 frames (in [0, 1] units) and PSNR between
worldtune's frames and the plain path's with the same inputs and seed, to be read against the noise floor.
Training goals report the timed steps' spread as their noise floor.

Results are merged into `--json` by goal, so several calls fill one file (on an H200, with the models' set-up:
fd_chunk + gen 134 s, fd_train + lora + predict25 120 s):

    python benchmarks/speed_round3.py --goals fd_chunk,gen --json benchmarks/results/speed_round3.json
    python benchmarks/speed_round3.py --goals fd_train,lora,predict25 --json benchmarks/results/speed_round3.json
    python benchmarks/speed_round3.py --tiny --device cpu --json /tmp/speed_round3.json             # CPU smoke test

`--budget-s` skips a goal whose estimated cost (GOAL_COST_S) no longer fits, rather than overrun the call.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cosmos3_bench as c3  # noqa: E402

from worldtune.models.float8 import quantize_blocks  # noqa: E402

GOALS = ("gen", "fd_chunk", "fd_train", "lora", "predict25")
# seconds per goal on an H200, about twice the measured ones (gen 74, fd_chunk 56 or 59 with --fd-compile, fd_train 32,
# lora 11, predict25 73): compilation times vary between machines
GOAL_COST_S = {"gen": 150, "fd_chunk": 150, "fd_train": 80, "lora": 60, "predict25": 150}
TARGETS = {"gen": ">= 2.0x the plain pipeline", "fd_chunk": "<= 1.0 s per chunk at serve's defaults",
           "fd_train": ">= 40 % MFU", "lora": ">= 60 % MFU", "predict25": ">= 2.5x the diffusers example"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--goals", default=",".join(GOALS), help=f"comma-separated, from {', '.join(GOALS)}")
    p.add_argument("--tiny", action="store_true", help="tiny models and shapes (CPU smoke test)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--videos", type=int, default=None, help="gen: timed videos per path; default 3 (tiny: 2)")
    p.add_argument("--compile-vae", action="store_true", help="gen: also compile the VAE decoder")
    p.add_argument("--fd-guidance", default=None, help="fd_chunk: comma-separated guidance scales; default 1.0,6.0 "
                   "(6.0 is serve's default; tiny: 6.0)")
    p.add_argument("--fd-steps", type=int, default=None, help="fd_chunk: denoising steps; default 35 (tiny: 2)")
    p.add_argument("--fd-batch", type=int, default=None, help="fd_chunk: rollouts stepped at once; default 4 (tiny: 2)")
    p.add_argument("--fd-compile", action="store_true", help="fd_chunk: compiled decoder layers under the graphs")
    p.add_argument("--fp8", action="store_true", help="gen, fd_chunk: also time worldtune's path with the blocks' "
                   "linears in float8 (torchao), a labelled option read against its own quality figure")
    p.add_argument("--fd-train-batch", default=None, help="fd_train: clips per step, comma-separated; default 1,4 "
                   "(tiny: 1,2)")
    p.add_argument("--repeats", type=int, default=None, help="fd_chunk: timed chunks per path; default 3 (tiny: 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=540.0, help="skip goals that no longer fit (0 = no budget)")
    p.add_argument("--json", default="benchmarks/results/speed_round3.json", help="results, merged by goal")
    args = p.parse_args(argv)
    args.goals = [g for g in args.goals.split(",") if g]
    unknown = [g for g in args.goals if g not in GOALS]
    if unknown:
        p.error(f"unknown goal(s) {unknown}: choose from {', '.join(GOALS)}")
    args.videos = args.videos or (2 if args.tiny else 3)
    args.fd_steps = args.fd_steps or (2 if args.tiny else 35)
    args.repeats = args.repeats or (1 if args.tiny else 3)
    args.fd_batch = args.fd_batch or (2 if args.tiny else 4)
    args.fd_train_batch = args.fd_train_batch or ("1,2" if args.tiny else "1,4")
    args.fd_guidance = [float(g) for g in (args.fd_guidance or ("6.0" if args.tiny else "1.0,6.0")).split(",") if g]
    return args


# ---------------------------------------------------------------------------------------------- helpers
def floor_kernel(device: torch.device) -> str:
    """Another correct SDPA kernel than PyTorch's own choice: the noise floor's second plain path."""
    return "cudnn" if device.type == "cuda" else "math"


def floor_context(device: torch.device):
    """SDPA pinned to the floor's kernel where it runs, the math kernel where it cannot (cuDNN takes heads of at
    most 256 channels: the Wan VAE's middle attention has 384)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from worldtune.models.speed import sdpa_backend

    return sdpa_kernel(list(dict.fromkeys([sdpa_backend(floor_kernel(device)), SDPBackend.MATH])), set_priority=True)


def frame_diff(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """Max / mean absolute difference of two uint8 videos in [0, 1] units, and PSNR (None when equal)."""
    d = np.abs(a.astype(np.int16) - b) / 255.0
    return {"max_abs": round(float(d.max()), 5), "mean_abs": round(float(d.mean()), 6),
            "psnr_db": c3.psnr(a / 255.0, b / 255.0)}


def clock(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    """(fn(), its wall seconds with the device synchronised on both ends)."""
    c3.sync(device)
    t0 = time.perf_counter()
    out = fn()
    c3.sync(device)
    return out, time.perf_counter() - t0


def ratio(baseline: float | None, ours: float | None) -> float | None:
    return round(baseline / ours, 3) if baseline and ours else None


def optional(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """An optional variant's figures, or why it failed: a failed option must not cost its goal's other figures."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- reported in the results, the goal goes on
        traceback.print_exc()
        return {"failed": f"{type(e).__name__}: {e}"}


def spread(times: list[float]) -> dict[str, float] | None:
    """The timed steps' spread: the noise floor of a step time."""
    return {"min_s": round(min(times), 4), "max_s": round(max(times), 4)} if times else None


# ---------------------------------------------------------------------------------------------- gen
def goal_gen(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from worldtune.infer.decode_queue import DecodeQueue
    from worldtune.models.frames import decode_view
    from worldtune.models.latents import to_uint8
    from worldtune.models.speed import apply_speed

    ns = SimpleNamespace(tiny=args.tiny, device=str(device), frames=9 if args.tiny else 93, height=32 if args.tiny else 480,
                         width=48 if args.tiny else 832, steps=2 if args.tiny else 20, guidance=6.0, seed=args.seed)
    dev, dtype, spec, family = c3.setup(ns)
    torch.manual_seed(args.seed)
    pipe = family.build_pipeline(str(dev), dtype)
    c3.keep_fp32_modules(pipe.transformer)
    pipe.set_progress_bar_config(disable=True)
    rng = np.random.default_rng(args.seed)
    images = [rng.integers(0, 256, (ns.height, ns.width, 3), dtype=np.uint8) for _ in range(args.videos)]

    c3.generate_once("pipeline", pipe, family, ns, images[0], 1)  # warm-up: kernels, allocator
    c3.reset_peak(dev)
    plain, plain_s = [], []
    for image in images:
        video, s = clock(lambda: c3.generate_once("pipeline", pipe, family, ns, image, ns.steps), dev)
        plain.append(to_uint8(video))
        plain_s.append(s)
    plain_peak = c3.peak_gib(dev)
    with floor_context(dev):
        floor = to_uint8(c3.generate_once("pipeline", pipe, family, ns, images[0], ns.steps))

    cuda = dev.type == "cuda"
    apply_speed(pipe.transformer, fused_adaln=False, compile=cuda, dynamic=family.compile_dynamic)
    if cuda:
        torch.backends.cudnn.benchmark = True
        if args.compile_vae:
            pipe.vae.decoder.compile()
    queue = DecodeQueue(dev, overlap=True)
    vae = decode_view(pipe.vae) if queue.background else None

    def settings(steps: int) -> SimpleNamespace:
        return SimpleNamespace(mode="image2world", height=ns.height, width=ns.width, num_frames=ns.frames,
                               fps=float(spec.fps), steps=steps, guidance=ns.guidance, negative_prompt=None,
                               cond_latent_frames=1)

    def worldtune_videos(steps: int, these: list[np.ndarray]) -> list[np.ndarray]:
        """What `worldtune generate` does per video: sample, hand the decode over, collect the previous one."""
        out, pending = [], None
        for image in these:
            x = family.generate_latents(pipe, settings(steps), image[None], c3.PROMPT, None, None, None, args.seed)
            future = queue.submit(lambda x=x: family.decode_latents(pipe, x, vae), (x,))
            if pending is not None:
                out.append(pending.result())
            pending = future
        out.append(pending.result())
        return out

    (_, warm_s) = clock(lambda: worldtune_videos(1, images[:2]), dev)  # compiles, tunes, starts the decode thread
    c3.reset_peak(dev)
    ours, ours_s = clock(lambda: worldtune_videos(ns.steps, images), dev)
    base, fast = sum(plain_s) / len(images), ours_s / len(images)
    fp8 = None
    if args.fp8:
        def fp8_videos() -> dict[str, Any]:
            layers = quantize_blocks(pipe.transformer, dev, "generate.fp8")
            clock(lambda: worldtune_videos(1, images[:2]), dev)  # recompiles the blocks with the FP8 layers
            low, low_s = clock(lambda: worldtune_videos(ns.steps, images), dev)
            return {"layers": layers, "worldtune_s": round(low_s / len(images), 3),
                    "ratio": ratio(base, low_s / len(images)), "vs_plain": [frame_diff(o, p) for o, p in zip(low, plain)],
                    "vs_worldtune_bf16": [frame_diff(o, p) for o, p in zip(low, ours)]}
        fp8 = optional(fp8_videos)
    queue.close()
    return {"what": f"{spec.name} image2world {ns.frames}x{ns.height}x{ns.width}, {ns.steps} steps, guidance "
                    f"{ns.guidance:g}, {len(images)} videos",
            "baseline": "Cosmos3OmniPipeline.__call__ per video", "worldtune": "compiled blocks + cudnn.benchmark + "
            "uint8 decode overlapped with the next video" + (" + compiled VAE decoder" if args.compile_vae else ""),
            "baseline_s": round(base, 3), "worldtune_s": round(fast, 3), "ratio": ratio(base, fast),
            "baseline_video_s": [round(s, 3) for s in plain_s], "worldtune_warmup_s": round(warm_s, 1),
            "noise_floor": {"kernel": floor_kernel(dev), **frame_diff(floor, plain[0])},
            "equality": [frame_diff(o, p) for o, p in zip(ours, plain)],
            "peak_gib": {"baseline": plain_peak, "worldtune": c3.peak_gib(dev)},
            **({"fp8": fp8} if fp8 else {})}


# ---------------------------------------------------------------------------------------------- fd_chunk
def goal_fd_chunk(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    import cosmos3_fd_generate_bench as fdg

    from worldtune.infer.dynamics import forward_dynamics
    from worldtune.models.action_dynamics import ChunkRequest
    from worldtune.models.cosmos3_domains import ActionDomain
    from worldtune.models.family import pipeline_dynamics

    fa = SimpleNamespace(tiny=args.tiny, seed=args.seed, height=64 if args.tiny else 480, width=112 if args.tiny else 832,
                         chunk=4 if args.tiny else 16, tier=256 if args.tiny else 480, fps=15.0)
    spec, pipe = fdg.build(fa, device)
    frame, actions = fdg.inputs(fa)
    domain = ActionDomain("droid_lerobot", 8, 10, new=False)
    cuda = device.type == "cuda"

    def request(seed: int, guidance: float, image: np.ndarray = frame, steps: int = args.fd_steps) -> ChunkRequest:
        return ChunkRequest(image, actions, domain, fdg.TASK, seed, steps, guidance, fa.tier, "ego_view", fa.fps)

    def plain(r: ChunkRequest) -> np.ndarray:
        return forward_dynamics(pipe, r.first_frame, r.actions, r.domain, r.task, seed=r.seed, steps=r.steps,
                                guidance=r.guidance, tier=r.tier, view_point=r.view_point, fps=r.fps)

    # the plain path first, every guidance: the sampler's `--fd-compile` compiles the pipeline's own layers in place
    rows = []
    for guidance in args.fd_guidance:
        one = request(args.seed, guidance)
        plain(request(args.seed, guidance, steps=1))  # warm-up
        c3.reset_peak(device)
        timed = [clock(lambda: plain(one), device) for _ in range(args.repeats)]
        ref, base = timed[0][0], statistics.median(s for _, s in timed)
        plain_peak = c3.peak_gib(device)
        with floor_context(device):
            floor = plain(one)
        rows.append({"guidance": guidance, "steps": args.fd_steps, "baseline_s": round(base, 3), "ref": ref,
                     "noise_floor": {"kernel": floor_kernel(device), **frame_diff(floor, ref)},
                     "peak_gib": {"baseline": plain_peak}})
    def measure(sampler, guidance: float, ref: np.ndarray, baseline_s: float) -> dict[str, Any]:
        """The sampler's chunk alone and `--fd-batch` rollouts at once, timed after their shapes' first chunk."""
        one = request(args.seed, guidance)
        sampler.run([request(args.seed, guidance, steps=1)])  # captures this shape's graphs (every step count's)
        c3.reset_peak(device)
        timed = [clock(lambda: sampler.run([one])[0], device) for _ in range(args.repeats)]
        ours, fast = timed[0][0], statistics.median(s for _, s in timed)
        fast_peak = c3.peak_gib(device)
        rng = np.random.default_rng(args.seed + 1)
        batch = [one] + [request(args.seed + i, guidance, rng.permutation(frame)) for i in range(1, args.fd_batch)]
        sampler.run([request(r.seed, guidance, r.first_frame, 1) for r in batch])  # captures the batch's shape
        c3.reset_peak(device)
        batched, batch_s = clock(lambda: sampler.run(batch), device)
        return {"worldtune_s": round(fast, 3), "worldtune_batch": args.fd_batch,
                "worldtune_batch_s_per_chunk": round(batch_s / len(batch), 3), "ratio": ratio(baseline_s, fast),
                "ratio_batched": ratio(baseline_s, batch_s / len(batch)),
                "equality": frame_diff(ours, ref), "equality_batched_vs_alone": frame_diff(batched[0], ours),
                "cuda_graphs_captured": sampler.call.captured, "frames": ours,
                "peak_gib": {"worldtune": fast_peak, "worldtune_batch": c3.peak_gib(device)}}

    def sampler():
        return pipeline_dynamics(pipe).chunk_sampler(pipe, fast=True, cuda_graphs=cuda, compile=args.fd_compile)

    refs = {row["guidance"]: row.pop("ref") for row in rows}
    bf16 = sampler()
    for row in rows:
        got = measure(bf16, row["guidance"], refs[row["guidance"]], row["baseline_s"])
        row["bf16_frames"] = got.pop("frames")
        row.update({**got, "peak_gib": {**row["peak_gib"], **got["peak_gib"]}})
    if args.fp8:
        def fp8_rows() -> dict[str, Any]:
            # a new sampler: the old one's graphs hold the bf16 layers
            layers = quantize_blocks(pipe.transformer, device, "serve.fp8")
            low = sampler()
            out = {}
            for row in rows:
                got = measure(low, row["guidance"], refs[row["guidance"]], row["baseline_s"])
                frames = got.pop("frames")
                out[str(row["guidance"])] = {**got, "vs_worldtune_bf16": frame_diff(frames, row["bf16_frames"])}
                print("fp8", row["guidance"], out[str(row["guidance"])], flush=True)
            return {"layers": layers, "by_guidance": out}
        fp8 = optional(fp8_rows)
        for row in rows:
            row["fp8"] = fp8.get("by_guidance", {}).get(str(row["guidance"]), fp8)  # or why it failed
    for row in rows:
        row.pop("bf16_frames")
        print(row, flush=True)
    serve_default = next((r for r in rows if r["guidance"] == 6.0), rows[0])
    return {"what": f"{spec.name} forward dynamics {fa.height}x{fa.width}, {fa.chunk} actions, {args.fd_steps} steps",
            "baseline": "forward_dynamics (Cosmos3OmniPipeline.__call__)",
            "worldtune": "serve's sampler: fixed buffers" + (", CUDA graphs" if cuda else "")
                         + (", compiled layers" if args.fd_compile else ""),
            **{k: serve_default[k] for k in ("baseline_s", "worldtune_s", "ratio", "noise_floor", "equality")},
            "headline_guidance": serve_default["guidance"], "rows": rows}


# ---------------------------------------------------------------------------------------------- training
def pick(rows: list[dict], name: str, key: str = "variant") -> dict | None:
    return next((r for r in rows if r.get(key) == name and ("s_per_step" in r or r.get("median_s"))), None)


def goal_fd_train(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Eager, one clip per step (the trainer's step before) against the best of compiled blocks x several clips per
    step (`train.batch_size`, one transformer call per step): time per clip and MFU."""
    import cosmos3_fd_bench as fdb

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--device", str(device), "--json", f"{tmp}/fd.json", "--batch", args.fd_train_batch]
        argv += ["--tiny"] if args.tiny else []
        if device.type == "cuda":
            argv += ["--variants", "eager,compiled"]
        result = fdb.main(argv)
    rows, meta = result["training"], result["meta"]
    timed = [r for r in rows if "s_per_step" in r]
    for r in timed:  # the planner's peak for this many action clips (caption, action tokens, no checkpointing)
        r["planner_gib"] = planned_gib(meta["spec"], meta["frames"], *meta["content"], batch=r["batch"],
                                       lora_rank=meta["lora_rank"], compiled=r["variant"] == "compiled",
                                       text_tokens=meta["text_tokens"], action_steps=meta["actions"])
        r["planner_error"] = round(r["planner_gib"] / r["peak_mem_gib"] - 1, 4) if r["peak_mem_gib"] else None
    eager = next((r for r in timed if r["variant"] == "eager" and r["batch"] == 1), None)
    best = max(timed, key=lambda r: r["mfu_989"], default=None)
    return {"what": "forward-dynamics LoRA step, " + ", ".join(f"{k} {meta.get(k)}" for k in
                                                               ("spec", "frames", "tier", "video_tokens")),
            "baseline": "eager, 1 clip per step",
            "worldtune": best and f"{best['variant']}, {best['batch']} clip(s) per step",
            "baseline_s": eager and eager["s_per_clip"], "worldtune_s": best and best["s_per_clip"],
            "seconds_are": "per clip", "ratio": ratio(eager and eager["s_per_clip"], best and best["s_per_clip"]),
            "mfu_989": best and best["mfu_989"], "noise_floor": best and spread(best["step_times_s"]),
            "peak_gib": best and best["peak_mem_gib"], "planner_gib": best and best["planner_gib"],
            "planner_error": best and best["planner_error"], "rows": rows}


def planned_gib(spec_name: str, frames: int, height: int, width: int, **kw: Any) -> float:
    """The memory planner's predicted peak (GiB) of a LoRA step without checkpointing (what the timed steps ran)."""
    from worldtune.models.memory import plan
    from worldtune.models.registry import get_spec

    predicted = plan(get_spec(spec_name), "lora", frames, height, width, grad_checkpointing="off", **kw)
    return round(sum(x.gib for x in predicted.lines), 2)


def goal_lora(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    ns = SimpleNamespace(tiny=args.tiny, device=str(device), height=32 if args.tiny else 480, width=48 if args.tiny else 832,
                         train_frames=9 if args.tiny else 93, train_steps=2 if args.tiny else 5, rank=16, alpha=32.0,
                         checkpoint="none", seed=args.seed,
                         train_variants="eager,compiled" if device.type == "cuda" else "eager")
    dev, dtype, spec, family = c3.setup(ns)
    pipe = family.build_pipeline("meta" if not args.tiny else "cpu", dtype)  # only its tokenizer is read
    tokens = family.encode_prompts(pipe, [c3.PROMPT], "tokens", num_frames=ns.train_frames, height=ns.height,
                                   width=ns.width, fps=float(spec.fps))
    del pipe
    rows = c3.bench_training(ns, spec, family, dev, dtype, tokens)
    eager, compiled = pick(rows, "eager"), pick(rows, "compiled")
    best = compiled or eager
    planner = planned_gib(spec.name, ns.train_frames, ns.height, ns.width, lora_rank=ns.rank,
                          compiled=compiled is not None)
    peak = best and best["peak_mem_gib"]
    return {"what": f"{spec.name} LoRA r{ns.rank} step, {ns.train_frames}x{ns.height}x{ns.width}",
            "baseline": "eager", "worldtune": "compiled blocks" if compiled else "eager (compiled needs CUDA)",
            "baseline_s": eager and eager["s_per_step"], "worldtune_s": best and best["s_per_step"],
            "ratio": ratio(eager and eager["s_per_step"], best and best["s_per_step"]),
            "mfu_989": best and best["mfu_989"], "noise_floor": best and spread(best["step_times_s"]),
            "peak_gib": peak, "planner_gib": planner,
            "planner_error": round(planner / peak - 1, 4) if peak else None, "rows": rows}


def goal_predict25(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    import train_bench as tb

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "train.json"
        tb.main(["--only", "A_example,B_best", "--out", str(out), "--device", str(device), "--budget-s", "0"]
                + (["--tiny"] if args.tiny else []))
        result = json.loads(out.read_text())
    rows = result["rows"]
    example, best = pick(rows, "A_example", "name"), pick(rows, "B_best", "name")
    base, ours = example and example["median_s"], best and best["median_s"]
    return {"what": "Predict2.5 LoRA step (train_bench.py shapes)", "baseline": "the diffusers example (A_example)",
            "worldtune": "B_best: cached inputs, per-frame adaLN, compiled blocks, auto checkpointing",
            "baseline_s": base and round(base, 4), "worldtune_s": ours and round(ours, 4), "ratio": ratio(base, ours),
            "mfu": best and best.get("mfu"), "noise_floor": best and spread(best.get("step_times") or []), "rows": rows}


RUNNERS = {"gen": goal_gen, "fd_chunk": goal_fd_chunk, "fd_train": goal_fd_train, "lora": goal_lora,
           "predict25": goal_predict25}


# ---------------------------------------------------------------------------------------------- report
def machine(device: torch.device) -> dict[str, Any]:
    import diffusers

    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "diffusers": diffusers.__version__, "date": time.strftime("%Y-%m-%d %H:%M %Z")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    device = torch.device(args.device)
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.is_file() else {"goals": {}}
    if args.tiny:
        results = {"goals": {}}  # a smoke test never mixes into measured figures
        torch.set_num_threads(1)  # tiny matmuls: more threads only contend
    t_start = time.perf_counter()
    failed: list[str] = []
    for goal in args.goals:
        used = time.perf_counter() - t_start
        if args.budget_s and not args.tiny and used + GOAL_COST_S[goal] > args.budget_s:
            print(f"{goal}: skipped, {used:.0f} s used of the {args.budget_s:.0f} s budget (~{GOAL_COST_S[goal]} s needed)")
            continue
        t0 = time.perf_counter()
        try:
            row = RUNNERS[goal](args, device)
        except Exception as e:  # one goal's failure must not cost the call's other goals on a rented GPU
            traceback.print_exc()
            print(f"{goal}: failed ({type(e).__name__}: {e}); going on with the next goal", flush=True)
            failed.append(goal)
            continue
        finally:
            if device.type == "cuda":
                torch._dynamo.reset()
                torch.cuda.empty_cache()
        row.update(target=TARGETS[goal], wall_s=round(time.perf_counter() - t0, 1), tiny=args.tiny, **machine(device))
        results["goals"][goal] = row
        print(f"{goal}: baseline {row['baseline_s']} s, worldtune {row['worldtune_s']} s, ratio {row['ratio']} "
              f"(target {row['target']}; {row['wall_s']} s)", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {path}")
    if failed:
        raise SystemExit(f"goal(s) failed: {', '.join(failed)} (tracebacks above)")
    return results


if __name__ == "__main__":
    main()
