"""Speed, round 4: every goal of the speed table in one run per card, the plain path and worldtune on the same card,
with float8 through torchao and any other labelled option as a variant of worldtune's path.

Goals (`--goals`, any of them, in this order), as in benchmarks/speed_round3.py:

  gen        Cosmos 3 Edge image2world, 93x480x832, 20 steps, guidance 6, `--videos` videos. Baseline: the plain
             `Cosmos3OmniPipeline.__call__` per video. worldtune: what `worldtune generate` runs on CUDA by default
             (compiled blocks, cuDNN's kernel search, each video decoded on its own stream while the next samples).
  fd_chunk   one forward-dynamics chunk (serve's `step`), 480x832, 16 DROID actions, 35 steps, per `--fd-guidance`.
             Baseline: the plain `forward_dynamics` call. worldtune: serve's own sampler (serve/world.py
             `chunk_sampler`), one chunk alone and `--fd-batch` rollouts at once.
  fd_train   forward-dynamics LoRA step (speed_round3's goal, unchanged: its target is met).
  lora       Cosmos 3 Edge LoRA step, 93x480x832: eager vs compiled, MFU against the bf16 dense peak (989 TFLOP/s).
  predict25  Predict2.5 2B LoRA step (train_bench.py): the diffusers example (`A_example`) vs `B_best`.

Variants (`--variant NAME=OVERRIDES`, repeatable; default `fp8=--generate.fp8 true --serve.fp8 true --train.fp8 true`,
`--variant none` for none): OVERRIDES are worldtune config overrides, as on `worldtune`'s command line. Each goal
times a variant after its bf16 figures, on a fresh copy of the bf16 weights, through worldtune's own set-up of that
stage: gen through `worldtune generate`'s (infer/generate.py `_speed_up`, which turns the generate section's options
on), fd_chunk through serve's (`chunk_sampler` with the serve section), lora and predict25 with `train.fp8` (the
trainer's float8 training of the frozen base linears). A variant with no override in a goal's section is not timed
there, and a training override other than `train.fp8` is refused (the training goals would not apply it). A variant's
frames are compared with the plain path's and with worldtune's bf16 frames: an option that the stage's set-up does
not apply shows as frames equal to bf16's (`same_as_bf16`).

Each goal's `best` names the fastest of worldtune's bf16 path and its variants and says whether that meets the speed
target (`speed_meets_target`); a lossy variant meets the goal only where its quality cost on the seed demo is within
the bound (docs/benchmarks.md's quality table), which this script does not measure.

Results are merged into `--json` by goal. On one lent GPU (benchmarks/speed_round4_device.sh installs the carried
wheels, torchao among them):

    python benchmarks/speed_round4.py --json benchmarks/results/speed_round4.json
    python benchmarks/speed_round4.py --tiny --device cpu --json /tmp/speed_round4.json   # CPU smoke test

On the CPU torchao refuses float8; the smoke test's float8 variants fail with that one line unless a test lifts
torchao's hardware check (tests/models/test_speed_round4_bench.py).
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
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
import speed_round3 as r3  # noqa: E402

GOALS = r3.GOALS
# seconds per goal with one float8 variant, for --budget-s: round 3's H200 figures (gen 74, fd_chunk 56, fd_train 32,
# lora 11, predict25 73) with the variant's recompilation and timing added, then doubled (H100s and compilation vary)
GOAL_COST_S = {"gen": 180, "fd_chunk": 160, "fd_train": 70, "lora": 60, "predict25": 170}
TARGETS = r3.TARGETS
DEFAULT_VARIANT = "fp8=--generate.fp8 true --serve.fp8 true --train.fp8 true"
TRAIN_OPTIONS = {"fp8"}  # the train options the training goals apply


# ---------------------------------------------------------------------------------------------- options
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--goals", default=",".join(GOALS), help=f"comma-separated, from {', '.join(GOALS)}")
    p.add_argument("--variant", action="append", default=None, metavar="NAME=OVERRIDES",
                   help=f"a labelled option set, timed after the bf16 figures (repeatable; default {DEFAULT_VARIANT!r};"
                        " 'none' for none)")
    p.add_argument("--tiny", action="store_true", help="tiny models and shapes (CPU smoke test)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--videos", type=int, default=None, help="gen: timed videos per path; default 3 (tiny: 2)")
    p.add_argument("--fd-guidance", default=None, help="fd_chunk: comma-separated guidance scales; default 1.0,6.0 "
                   "(tiny: 6.0)")
    p.add_argument("--fd-steps", type=int, default=None, help="fd_chunk: denoising steps; default 35 (tiny: 2)")
    p.add_argument("--fd-batch", type=int, default=None, help="fd_chunk: rollouts stepped at once; default 4 (tiny: 2)")
    p.add_argument("--fd-compile", action="store_true", help="fd_chunk: serve.compile (compiled decoder layers)")
    p.add_argument("--fd-train-batch", default=None, help="fd_train: clips per step; default 1,4 (tiny: 1,2)")
    p.add_argument("--repeats", type=int, default=None, help="fd_chunk: timed chunks per path; default 3 (tiny: 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=560.0, help="skip goals that no longer fit (0 = no budget)")
    p.add_argument("--json", default="benchmarks/results/speed_round4.json", help="results, merged by goal")
    args = p.parse_args(argv)
    args.goals = [g for g in args.goals.split(",") if g]
    if unknown := [g for g in args.goals if g not in GOALS]:
        p.error(f"unknown goal(s) {unknown}: choose from {', '.join(GOALS)}")
    try:
        args.variants = parse_variants(args.variant if args.variant is not None else [DEFAULT_VARIANT])
    except ValueError as e:
        p.error(str(e))
    args.videos = args.videos or (2 if args.tiny else 3)
    args.fd_steps = args.fd_steps or (2 if args.tiny else 35)
    args.repeats = args.repeats or (1 if args.tiny else 3)
    args.fd_batch = args.fd_batch or (2 if args.tiny else 4)
    args.fd_train_batch = args.fd_train_batch or ("1,2" if args.tiny else "1,4")
    args.fd_guidance = [float(g) for g in (args.fd_guidance or ("6.0" if args.tiny else "1.0,6.0")).split(",") if g]
    return args


def parse_variants(specs: list[str]) -> dict[str, dict[str, Any]]:
    """NAME -> {"overrides": [...], "sections": {section: {key: value}}, "config": the validated config}, from
    `NAME=--section.key value ...` (each override checked by worldtune's own config loader)."""
    from worldtune.config import load_config
    from worldtune.errors import ConfigError

    variants: dict[str, dict[str, Any]] = {}
    for spec in specs:
        if spec == "none":
            continue
        name, sep, rest = spec.partition("=")
        overrides = shlex.split(rest)
        if not sep or not name or not overrides:
            raise ValueError(f"--variant {spec!r}: write NAME=--section.key value ... (or 'none')")
        keys = [o[2:] for o in overrides if o.startswith("--")]
        sections: dict[str, dict[str, Any]] = {}
        for key in keys:
            section, _, option = key.partition(".")
            sections.setdefault(section, {})[option] = None
        try:
            cfg = load_config(None, overrides)
        except ConfigError as e:
            raise ValueError(f"--variant {name}: {e}") from None
        if extra := set(sections.get("train", {})) - TRAIN_OPTIONS:
            raise ValueError(f"--variant {name}: the training goals apply only train.{', train.'.join(TRAIN_OPTIONS)}"
                             f", not train.{', train.'.join(sorted(extra))}")
        variants[name] = {"overrides": overrides, "sections": sorted(sections), "config": cfg}
    return variants


def variants_for(args: argparse.Namespace, section: str) -> dict[str, Any]:
    """name -> that variant's config, for the variants that set an option of `section`."""
    return {n: v["config"] for n, v in args.variants.items() if section in v["sections"]}


# ---------------------------------------------------------------------------------------------- gen
def fresh_transformer(pipe, pristine: torch.nn.Module, device: torch.device) -> None:
    """The bf16 weights again (a variant's set-up changes its transformer in place), compiled code dropped."""
    pipe.transformer = None
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    pipe.transformer = copy.deepcopy(pristine).to(device)


def goal_gen(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from worldtune.infer.decode_queue import DecodeQueue
    from worldtune.infer.generate import _speed_up
    from worldtune.models.frames import decode_view
    from worldtune.models.latents import to_uint8

    ns = SimpleNamespace(tiny=args.tiny, device=str(device), frames=9 if args.tiny else 93,
                         height=32 if args.tiny else 480, width=48 if args.tiny else 832, steps=2 if args.tiny else 20,
                         guidance=6.0, seed=args.seed)
    dev, dtype, spec, family = c3.setup(ns)
    torch.manual_seed(args.seed)
    pipe = family.build_pipeline(str(dev), dtype)
    c3.keep_fp32_modules(pipe.transformer)
    pipe.set_progress_bar_config(disable=True)
    variants = variants_for(args, "generate")
    pristine = copy.deepcopy(pipe.transformer).to("cpu") if variants else None
    rng = np.random.default_rng(args.seed)
    images = [rng.integers(0, 256, (ns.height, ns.width, 3), dtype=np.uint8) for _ in range(args.videos)]

    c3.generate_once("pipeline", pipe, family, ns, images[0], 1)  # warm-up: kernels, allocator
    c3.reset_peak(dev)
    plain, plain_s = [], []
    for image in images:
        video, s = r3.clock(lambda: c3.generate_once("pipeline", pipe, family, ns, image, ns.steps), dev)
        plain.append(to_uint8(video))
        plain_s.append(s)
    plain_peak = c3.peak_gib(dev)
    with r3.floor_context(dev):
        floor = to_uint8(c3.generate_once("pipeline", pipe, family, ns, images[0], ns.steps))

    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    queue = DecodeQueue(dev, overlap=True)
    vae = decode_view(pipe.vae) if queue.background else None

    def set_up(g) -> None:
        """`worldtune generate`'s own set-up of the transformer for generate section `g` (compiled on CUDA)."""
        _speed_up(pipe.transformer, g, SimpleNamespace(fp8=g.fp8, compile=cuda, fused_adaln=False),
                  family.compile_dynamic)

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

    def timed_videos() -> tuple[list[np.ndarray], float, float]:
        """(videos, seconds per video, warm-up seconds): the first two videos at one step compile and tune."""
        _, warm_s = r3.clock(lambda: worldtune_videos(1, images[:2]), dev)
        c3.reset_peak(dev)
        videos, s = r3.clock(lambda: worldtune_videos(ns.steps, images), dev)
        return videos, s / len(images), warm_s

    from worldtune.config import load_config

    set_up(load_config(None, []).generate)
    ours, fast, warm_s = timed_videos()
    ours_peak = c3.peak_gib(dev)
    base = sum(plain_s) / len(images)
    results = {}
    for name, cfg in variants.items():
        def variant(cfg=cfg) -> dict[str, Any]:
            fresh_transformer(pipe, pristine, dev)
            set_up(cfg.generate)
            low, low_s, low_warm = timed_videos()
            vs_bf16 = [r3.frame_diff(o, p) for o, p in zip(low, ours)]
            return {"worldtune_s": round(low_s, 3), "ratio": r3.ratio(base, low_s), "warmup_s": round(low_warm, 1),
                    "vs_plain": [r3.frame_diff(o, p) for o, p in zip(low, plain)], "vs_worldtune_bf16": vs_bf16,
                    "same_as_bf16": all(e["max_abs"] == 0 for e in vs_bf16), "peak_gib": c3.peak_gib(dev)}
        results[name] = r3.optional(variant)
        print(f"gen {name}: {results[name]}", flush=True)
    queue.close()
    row = {"what": f"{spec.name} image2world {ns.frames}x{ns.height}x{ns.width}, {ns.steps} steps, guidance "
                   f"{ns.guidance:g}, {len(images)} videos",
           "baseline": "Cosmos3OmniPipeline.__call__ per video",
           "worldtune": "worldtune generate's set-up: compiled blocks + cudnn.benchmark + uint8 decode overlapped with "
                        "the next video",
           "baseline_s": round(base, 3), "worldtune_s": round(fast, 3), "ratio": r3.ratio(base, fast),
           "baseline_video_s": [round(s, 3) for s in plain_s], "worldtune_warmup_s": round(warm_s, 1),
           "noise_floor": {"kernel": r3.floor_kernel(dev), **r3.frame_diff(floor, plain[0])},
           "equality": [r3.frame_diff(o, p) for o, p in zip(ours, plain)],
           "peak_gib": {"baseline": plain_peak, "worldtune": ours_peak}, "variants": results}
    row["best"] = best_of(row, lambda r: r.get("ratio"), lambda r: (r.get("ratio") or 0) >= 2.0)
    return row


# ---------------------------------------------------------------------------------------------- fd_chunk
def goal_fd_chunk(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    import cosmos3_fd_generate_bench as fdg

    from worldtune.config import load_config
    from worldtune.infer.dynamics import forward_dynamics
    from worldtune.models.action_dynamics import ChunkRequest
    from worldtune.models.cosmos3_domains import ActionDomain
    from worldtune.serve.world import chunk_sampler

    fa = SimpleNamespace(tiny=args.tiny, seed=args.seed, height=64 if args.tiny else 480,
                         width=112 if args.tiny else 832, chunk=4 if args.tiny else 16, tier=256 if args.tiny else 480,
                         fps=15.0)
    spec, pipe = fdg.build(fa, device)
    variants = variants_for(args, "serve")
    pristine = copy.deepcopy(pipe.transformer).to("cpu") if variants else None
    frame, actions = fdg.inputs(fa)
    domain = ActionDomain("droid_lerobot", 8, 10, new=False)
    serve_args = ["--serve.compile", str(args.fd_compile).lower()]

    def request(seed: int, guidance: float, image: np.ndarray = frame, steps: int = args.fd_steps) -> ChunkRequest:
        return ChunkRequest(image, actions, domain, fdg.TASK, seed, steps, guidance, fa.tier, "ego_view", fa.fps)

    def plain(r: ChunkRequest) -> np.ndarray:
        return forward_dynamics(pipe, r.first_frame, r.actions, r.domain, r.task, seed=r.seed, steps=r.steps,
                                guidance=r.guidance, tier=r.tier, view_point=r.view_point, fps=r.fps)

    rows = []  # the plain path first, every guidance: serve.compile compiles the pipeline's own layers in place
    for guidance in args.fd_guidance:
        one = request(args.seed, guidance)
        plain(request(args.seed, guidance, steps=1))  # warm-up
        c3.reset_peak(device)
        timed = [r3.clock(lambda: plain(one), device) for _ in range(args.repeats)]
        ref, base = timed[0][0], statistics.median(s for _, s in timed)
        plain_peak = c3.peak_gib(device)
        with r3.floor_context(device):
            floor = plain(one)
        rows.append({"guidance": guidance, "steps": args.fd_steps, "baseline_s": round(base, 3), "ref": ref,
                     "noise_floor": {"kernel": r3.floor_kernel(device), **r3.frame_diff(floor, ref)},
                     "peak_gib": {"baseline": plain_peak}})

    def measure(sampler, row: dict[str, Any]) -> dict[str, Any]:
        """The sampler's chunk alone and `--fd-batch` rollouts at once, timed after their shapes' first chunk."""
        guidance = row["guidance"]
        one = request(args.seed, guidance)
        sampler.run([request(args.seed, guidance, steps=1)])  # captures this shape's graphs
        c3.reset_peak(device)
        timed = [r3.clock(lambda: sampler.run([one])[0], device) for _ in range(args.repeats)]
        ours, fast = timed[0][0], statistics.median(s for _, s in timed)
        fast_peak = c3.peak_gib(device)
        rng = np.random.default_rng(args.seed + 1)
        batch = [one] + [request(args.seed + i, guidance, rng.permutation(frame)) for i in range(1, args.fd_batch)]
        sampler.run([request(r.seed, guidance, r.first_frame, 1) for r in batch])  # captures the batch's shape
        c3.reset_peak(device)
        batched, batch_s = r3.clock(lambda: sampler.run(batch), device)
        return {"worldtune_s": round(fast, 3), "worldtune_batch": args.fd_batch,
                "worldtune_batch_s_per_chunk": round(batch_s / len(batch), 3),
                "ratio": r3.ratio(row["baseline_s"], fast), "ratio_batched": r3.ratio(row["baseline_s"],
                                                                                      batch_s / len(batch)),
                "equality": r3.frame_diff(ours, row["ref"]),
                "equality_batched_vs_alone": r3.frame_diff(batched[0], ours),
                "frames": ours, "peak_gib": {"worldtune": fast_peak, "worldtune_batch": c3.peak_gib(device)}}

    bf16 = chunk_sampler(pipe, load_config(None, serve_args).serve)
    for row in rows:
        got = measure(bf16, row)
        row["bf16_frames"] = got.pop("frames")
        row.update({**got, "peak_gib": {**row["peak_gib"], **got["peak_gib"]}})
    del bf16
    for name, cfg in variants.items():
        def variant(cfg=cfg) -> dict[str, Any]:
            fresh_transformer(pipe, pristine, device)
            sampler = chunk_sampler(pipe, load_config(None, [*serve_args, *args.variants[name]["overrides"]]).serve)
            out = {}
            for row in rows:
                got = measure(sampler, row)
                frames = got.pop("frames")
                vs_bf16 = r3.frame_diff(frames, row["bf16_frames"])
                out[str(row["guidance"])] = {**got, "vs_worldtune_bf16": vs_bf16,
                                             "same_as_bf16": vs_bf16["max_abs"] == 0}
            return out
        got = r3.optional(variant)
        for row in rows:
            row.setdefault("variants", {})[name] = got.get(str(row["guidance"]), got)  # or why it failed
        print(f"fd_chunk {name}: {got}", flush=True)
    for row in rows:
        row.pop("bf16_frames")
        row.pop("ref")
    serve_default = next((r for r in rows if r["guidance"] == 6.0), rows[0])
    result = {"what": f"{spec.name} forward dynamics {fa.height}x{fa.width}, {fa.chunk} actions, {args.fd_steps} steps",
              "baseline": "forward_dynamics (Cosmos3OmniPipeline.__call__)",
              "worldtune": "serve's sampler (serve/world.py chunk_sampler)" + (", compiled layers" if args.fd_compile
                                                                                else ""),
              **{k: serve_default[k] for k in ("baseline_s", "worldtune_s", "ratio", "noise_floor", "equality")},
              "headline_guidance": serve_default["guidance"], "rows": rows,
              "variants": serve_default.get("variants", {})}

    def per_chunk(r: dict[str, Any]) -> float | None:
        times = [t for t in (r.get("worldtune_s"), r.get("worldtune_batch_s_per_chunk")) if t]
        return min(times) if times else None

    batch_s = serve_default.get("worldtune_batch_s_per_chunk")
    result["best"] = best_of({**result, "worldtune_batch_s_per_chunk": batch_s},
                             lambda r: -(per_chunk(r) or float("inf")), lambda r: (per_chunk(r) or 9e9) <= 1.0)
    return result


# ---------------------------------------------------------------------------------------------- training
def train_variants(args: argparse.Namespace) -> list[str]:
    """The variants whose train.fp8 is on (the one train option the training goals apply)."""
    return [n for n, cfg in variants_for(args, "train").items() if cfg.train.fp8]


def goal_lora(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """speed_round3's LoRA goal, then each float8 variant's compiled (CPU: eager) step on a fresh model."""
    row = r3.goal_lora(args, device)
    ns = SimpleNamespace(tiny=args.tiny, device=str(device), height=32 if args.tiny else 480,
                         width=48 if args.tiny else 832, train_frames=9 if args.tiny else 93,
                         train_steps=2 if args.tiny else 5, rank=16, alpha=32.0, checkpoint="none", seed=args.seed,
                         train_variants="compiled" if device.type == "cuda" else "eager", fp8=True)
    results = {}
    for name in train_variants(args):
        def variant() -> dict[str, Any]:
            torch._dynamo.reset()
            dev, dtype, spec, family = c3.setup(ns)
            pipe = family.build_pipeline("meta" if not args.tiny else "cpu", dtype)  # only its tokenizer is read
            tokens = family.encode_prompts(pipe, [c3.PROMPT], "tokens", num_frames=ns.train_frames, height=ns.height,
                                           width=ns.width, fps=float(spec.fps))
            del pipe
            got = r3.pick(c3.bench_training(ns, spec, family, dev, dtype, tokens), ns.train_variants)
            if got is None:
                raise RuntimeError(f"the {ns.train_variants} float8 step did not run")
            return {"worldtune_s": got["s_per_step"], "ratio": r3.ratio(row["baseline_s"], got["s_per_step"]),
                    "mfu_989": got["mfu_989"], "peak_gib": got["peak_mem_gib"], "losses": got.get("losses"),
                    "noise_floor": r3.spread(got["step_times_s"])}
        results[name] = r3.optional(variant)
        print(f"lora {name}: {results[name]}", flush=True)
    row["variants"] = results
    row["best"] = best_of(row, lambda r: r.get("mfu_989"), lambda r: (r.get("mfu_989") or 0) >= 0.60)
    return row


def goal_predict25(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The diffusers example against `B_best`, and `B_best_fp8` (train.fp8) where a variant asks for it."""
    import train_bench as tb

    fp8 = train_variants(args)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "train.json"
        only = "A_example,B_best" + (",B_best_fp8" if fp8 else "")
        tb.main(["--only", only, "--out", str(out), "--device", str(device), "--budget-s", "0"]
                + (["--tiny"] if args.tiny else []))
        rows = json.loads(out.read_text())["rows"]
    example, best = r3.pick(rows, "A_example", "name"), r3.pick(rows, "B_best", "name")
    base, ours = example and example["median_s"], best and best["median_s"]
    low = next((r for r in rows if r.get("name") == "B_best_fp8"), None)
    results = {}
    for name in fp8:
        if low is None or not low.get("median_s"):
            results[name] = {"failed": (low or {}).get("status", "B_best_fp8 did not run")}
        else:
            results[name] = {"worldtune_s": round(low["median_s"], 4), "ratio": r3.ratio(base, low["median_s"]),
                             "mfu": low.get("mfu"), "numerics": low.get("numerics"),
                             "noise_floor": r3.spread(low.get("step_times") or [])}
    row = {"what": "Predict2.5 LoRA step (train_bench.py shapes)", "baseline": "the diffusers example (A_example)",
           "worldtune": "B_best: cached inputs, per-frame adaLN, compiled blocks, auto checkpointing",
           "baseline_s": base and round(base, 4), "worldtune_s": ours and round(ours, 4), "ratio": r3.ratio(base, ours),
           "mfu": best and best.get("mfu"), "noise_floor": best and r3.spread(best.get("step_times") or []),
           "rows": rows, "variants": results}
    row["best"] = best_of(row, lambda r: r.get("ratio"), lambda r: (r.get("ratio") or 0) >= 2.5)
    return row


def goal_fd_train(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    row = r3.goal_fd_train(args, device)
    row["best"] = best_of(row, lambda r: r.get("mfu_989"), lambda r: (r.get("mfu_989") or 0) >= 0.40)
    return row


def best_of(row: dict[str, Any], score: Callable[[dict], float | None],
            meets: Callable[[dict], bool]) -> dict[str, Any]:
    """The highest-scoring of worldtune's bf16 path and the variants that ran, and whether it meets the speed
    target (a lossy variant also needs its quality cost within the bound: docs/benchmarks.md)."""
    candidates = {"bf16": row, **{n: v for n, v in (row.get("variants") or {}).items() if "failed" not in v}}
    scored = {n: score(r) for n, r in candidates.items() if score(r) is not None}
    if not scored:
        return {"name": None, "speed_meets_target": False}
    name = max(scored, key=scored.get)
    return {"name": name, "speed_meets_target": bool(meets(candidates[name]))}


RUNNERS = {"gen": goal_gen, "fd_chunk": goal_fd_chunk, "fd_train": goal_fd_train, "lora": goal_lora,
           "predict25": goal_predict25}


# ---------------------------------------------------------------------------------------------- report
def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    device = torch.device(args.device)
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.is_file() and not args.tiny else {"goals": {}}
    if args.tiny:
        torch.set_num_threads(1)  # tiny matmuls: more threads only contend
    results["variants"] = {n: v["overrides"] for n, v in args.variants.items()}
    t_start = time.perf_counter()
    failed: list[str] = []
    for goal in args.goals:
        used = time.perf_counter() - t_start
        if args.budget_s and not args.tiny and used + GOAL_COST_S[goal] > args.budget_s:
            print(f"{goal}: skipped, {used:.0f} s used of the {args.budget_s:.0f} s budget "
                  f"(~{GOAL_COST_S[goal]} s needed)")
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
        row.update(target=TARGETS[goal], wall_s=round(time.perf_counter() - t0, 1), tiny=args.tiny,
                   **r3.machine(device), **torchao_version())
        results["goals"][goal] = row
        print(f"{goal}: baseline {row['baseline_s']} s, worldtune {row['worldtune_s']} s, ratio {row['ratio']}, best "
              f"{row['best']} (target {row['target']}; {row['wall_s']} s)", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {path}")
    if failed:
        raise SystemExit(f"goal(s) failed: {', '.join(failed)} (tracebacks above)")
    return results


def torchao_version() -> dict[str, str | None]:
    try:
        import torchao
    except ImportError:
        return {"torchao": None}
    return {"torchao": torchao.__version__}


if __name__ == "__main__":
    main()
