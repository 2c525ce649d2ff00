"""Cosmos 3 Edge on one GPU, in one run: generation (plain pipeline vs worldtune) and a LoRA training step.

Builds a random-initialised `cosmos3-edge` from the registry (the family's `build_pipeline`: bf16
transformer, the Wan2.2 VAE, the offline tokenizer; the transformer's `time_embedder` kept in fp32
as `from_pretrained(torch_dtype=bfloat16)` keeps it) and measures:

(a) generation, image2world, one video per variant, same seed and inputs; variants run in this order
    because the speed switches cannot be undone:

  pipeline        `Cosmos3OmniPipeline.__call__` as a user calls it (eager, PyTorch's SDPA choice), float32
                  frames on the host (its uint8 conversion is timed apart, not counted)
  worldtune       `Cosmos3.generate` (what `worldtune generate` runs), no speed switch: the same call,
                  VAE-encoding only the conditioning frame and decoding straight to uint8 frames on the device
                  (models/frames.py), equal to the pipeline's frames through `to_uint8`
  pipeline_flash  `pipeline` with SDPA pinned to flash inside the transformer blocks, and
  pipeline_cudnn  pinned to cuDNN: other correct bf16 attention kernels, so their differences from
                  `pipeline` are the bf16 noise floor against which the fast variants are read
  pipeline_math   pinned to the math kernel (the CPU smoke test's noise floor)
  fast_float      compiled repeated blocks with the pipeline's own float32 decode and postprocess (what
                  `worldtune generate` ran on CUDA before the uint8 decode)
  fast            `worldtune` + compiled repeated blocks: what `worldtune generate` runs on CUDA by default
  fast_cudnn      `fast` with generate.attention_backend = "cudnn"
  fast_flash      `fast` with generate.attention_backend = "flash"
  fast_vae_cl     `fast` with the VAE's weights in channels-last 3D (cuDNN's other conv kernels)
  fast_vae        `fast` with the VAE decoder compiled too (its warm-up decodes, so compiling is not timed)

  Each variant is warmed up with 1 step (compilation, kernel loading; the first variant as a whole video,
  the others without decoding), then timed. A `fast_<kernel>` variant is skipped when `pipeline_<kernel>`
  equals `pipeline` bit for bit (that kernel is PyTorch's own choice, so `fast` already measured it).
  Reported: seconds per video, speed-up over `pipeline`, transformer calls and their time, VAE encode
  and decode time (for worldtune's path: decode to uint8 frames on the host), peak GPU memory, max / mean
  abs difference of the uint8 frames (in [0, 1] units) from `pipeline`'s frames through `to_uint8`, and PSNR. The two guidance branches stay two transformer calls: their token sequences
  differ in length (prompt vs negative prompt), and the transformer takes one unpadded sequence per call.

(b) a LoRA training step through worldtune's path: `Cosmos3.predict` + `FlowMatchingLoss` with NVIDIA's
    Cosmos 3 objective (waver times, shift by resolution; one conditioning frame, no text dropout, so
    every step has the same shapes), LoRA rank 16 / alpha 32 on the family's `lora_targets` via
    `apply_training_mode` (bf16 base, fp32 adapters), fused AdamW; variants `eager` and `compiled`
    (compiled repeated blocks, as the trainer does on CUDA). Reported: s/step, MFU from the family's
    `train_flops_per_sample` (the trainer's convention: 3 x forward at 512 text tokens, no conditioning
    frame) and from the exact text length and conditioning frame, against 989 TFLOP/s (H200 dense bf16)
    and WORLDTUNE_PEAK_TFLOPS (the trainer's peak, default 790), and peak memory.

Imports only torch, diffusers, peft, safetensors, numpy and worldtune modules that need neither pydantic
nor PyAV (diffusers' Cosmos 3 pipeline needs transformers for its tokenizer).

    python benchmarks/cosmos3_bench.py --json cosmos3_bench.json            # real size on CUDA (~5 min, H200)
    python benchmarks/cosmos3_bench.py --tiny --json /tmp/cosmos3_bench.json # CPU smoke test on tiny-cosmos3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

# variant -> (worldtune's path, compiled blocks, SDPA kernel pinned in the blocks)
GEN_VARIANTS = {
    "pipeline": (False, False, None), "worldtune": (True, False, None), "pipeline_flash": (False, False, "flash"),
    "pipeline_cudnn": (False, False, "cudnn"), "pipeline_math": (False, False, "math"),
    "fast_float": (False, True, None), "fast": (True, True, None), "fast_cudnn": (True, True, "cudnn"),
    "fast_flash": (True, True, "flash"), "fast_vae_cl": (True, True, None), "fast_vae": (True, True, None),
}
VAE_COMPILED = {"fast_vae"}  # `fast` plus a compiled VAE decoder (the VAE decode is a third of `fast`'s time)
VAE_CHANNELS_LAST = {"fast_vae_cl"}  # `fast` with the VAE in channels-last 3D (cannot be undone: run it last)
GPU_GEN = "pipeline,worldtune,pipeline_flash,pipeline_cudnn,fast_float,fast,fast_cudnn,fast_flash,fast_vae_cl"
CPU_GEN = "pipeline,worldtune,pipeline_math"
# variant -> (compiled blocks, SDPA kernel pinned)
TRAIN_VARIANTS = {"eager": (False, None), "compiled": (True, None), "compiled_cudnn": (True, "cudnn"),
                  "compiled_flash": (True, "flash")}
H200_PEAK_TFLOPS = 989.0  # dense bf16, NVIDIA's H200 datasheet
PROMPT = ("A robot arm with a black two-finger gripper reaches across a wooden table, picks up a red cube next to "
          "a blue bowl, lifts it slowly and places it inside the bowl, then returns to its starting pose. The "
          "camera is static and the lighting is soft and even.")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny-cosmos3 on any device (smoke test)")
    p.add_argument("--frames", type=int, default=None, help="generation frames; default 93 (tiny: 9)")
    p.add_argument("--height", type=int, default=None, help="default 480 (tiny: 32)")
    p.add_argument("--width", type=int, default=None, help="default 832 (tiny: 48)")
    p.add_argument("--steps", type=int, default=None, help="sampler steps; default 20 (tiny: 2)")
    p.add_argument("--guidance", type=float, default=6.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default=None, help=f"generation variants; default {GPU_GEN} (CPU: {CPU_GEN})")
    p.add_argument("--train-variants", default=None, help="default eager,compiled (CPU: eager); '' skips training")
    p.add_argument("--train-frames", type=int, default=None, help="training clip frames; default 93 (tiny: 9)")
    p.add_argument("--train-steps", type=int, default=None, help="timed steps per variant; default 5 (tiny: 2)")
    p.add_argument("--rank", type=int, default=16, help="LoRA rank (NVIDIA's recipe: 16)")
    p.add_argument("--alpha", type=float, default=32.0, help="LoRA alpha (NVIDIA's recipe: 32)")
    p.add_argument("--checkpoint", choices=("none", "selective"), default="none",
                   help="training: selective checkpointing of every block (keeps attention outputs)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default="cosmos3_bench.json", help="where to write the results")
    args = p.parse_args()
    cuda = args.device.startswith("cuda")
    for name, real, tiny in (("frames", 93, 9), ("height", 480, 32), ("width", 832, 48), ("steps", 20, 2),
                             ("train_frames", 93, 9), ("train_steps", 5, 2)):
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else real)
    args.variants = args.variants if args.variants is not None else GPU_GEN if cuda else CPU_GEN
    if args.train_variants is None:
        args.train_variants = "eager,compiled" if cuda else "eager"
    return args


# ---------------------------------------------------------------------------------------------- timing
def setup(args: argparse.Namespace):
    """Device, dtype (bf16 on CUDA, fp32 on the CPU), spec (`--tiny` or Edge) and family of a Cosmos 3 benchmark;
    room for several compiled graphs of one block (several attention kernels = several graphs)."""
    from worldtune.models.family import family_of
    from worldtune.models.registry import get_spec

    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    device = torch.device(args.device)
    spec = get_spec("tiny-cosmos3" if args.tiny else "cosmos3-edge")
    return device, torch.bfloat16 if device.type == "cuda" else torch.float32, spec, family_of(spec)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ForwardTimer:
    """Times every transformer call (synchronising CUDA) through hooks that change nothing else."""

    def __init__(self, module: torch.nn.Module, device: torch.device) -> None:
        self.device, self.times, self._t0 = device, [], 0.0
        self._handles = [module.register_forward_pre_hook(lambda *_: self._start()),
                         module.register_forward_hook(lambda *_: self._stop())]

    def _start(self) -> None:
        sync(self.device)
        self._t0 = time.perf_counter()

    def _stop(self) -> None:
        sync(self.device)
        self.times.append(time.perf_counter() - self._t0)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


@contextmanager
def timed(module, method: str, sink: list[float], device: torch.device):
    """Time calls of `module.<method>` (an instance's method, or a module-level function) made inside the
    block: the pipeline calls the VAE internally, `Cosmos3.generate` calls `frames.decode_to_frames`."""
    orig = getattr(module, method)
    own = method in vars(module)  # a module's function: put it back; an instance's method: drop the override

    def wrapped(*a, **k):
        sync(device)
        t0 = time.perf_counter()
        out = orig(*a, **k)
        sync(device)
        sink.append(time.perf_counter() - t0)
        return out

    setattr(module, method, wrapped)
    try:
        yield
    finally:
        if own:
            setattr(module, method, orig)
        else:
            delattr(module, method)


def peak_gib(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def keep_fp32_modules(model: torch.nn.Module) -> torch.nn.Module:
    """What from_pretrained(torch_dtype=bf16) does: the modules the class lists stay in fp32."""
    for name in getattr(model, "_keep_in_fp32_modules", None) or ():
        getattr(model, name).float()
    return model


# ------------------------------------------------------------------------------------------ generation
def generate_once(name: str, pipe, family, args, image: np.ndarray, steps: int, latent: bool = False) -> np.ndarray:
    """One image2world video [T, H, W, 3]: the plain call (float in [0, 1]), worldtune's (uint8), or, for
    `fast_float`, the plain call VAE-encoding only the conditioning frame (float); `latent`: the plain call
    without decoding, a warm-up of the transformer only."""
    from PIL import Image

    from worldtune.models.cosmos3 import encode_leading_frames, template_flags

    ours, compiled, _ = GEN_VARIANTS[name]
    if ours and not latent:
        s = SimpleNamespace(mode="image2world", height=args.height, width=args.width, num_frames=args.frames,
                            fps=float(family.spec.fps), steps=steps, guidance=args.guidance, negative_prompt=None,
                            cond_latent_frames=1, compile=compiled)
        return family.generate(pipe, s, image[None], PROMPT, None, None, None, args.seed)
    kw = dict(image=Image.fromarray(image), num_frames=args.frames, height=args.height, width=args.width,
              fps=float(family.spec.fps), num_inference_steps=steps, guidance_scale=args.guidance,
              generator=torch.Generator("cpu").manual_seed(args.seed), output_type="latent" if latent else "np")
    if name == "fast_float":
        with encode_leading_frames(pipe, 1):
            return pipe(PROMPT, **kw, **template_flags(PROMPT)).video
    return pipe(PROMPT, **kw).video


def as_uint8(video: np.ndarray) -> tuple[np.ndarray, float]:
    """The frames as uint8 (what is written to a video file) and the seconds the host conversion took."""
    from worldtune.models.latents import to_uint8

    t0 = time.perf_counter()
    out = to_uint8(video)
    return out, (time.perf_counter() - t0 if video.dtype != np.uint8 else 0.0)


def switch_on(pipe, family, name: str, state: dict, device: torch.device) -> str | None:
    """Apply the variant's switches; returns why it cannot run here (None: it can)."""
    from worldtune.models.speed import apply_speed, set_attention

    _, compiled, attention = GEN_VARIANTS[name]
    if attention in ("cudnn", "flash") and device.type != "cuda":
        return f"SDPA {attention} needs CUDA"
    if compiled and device.type != "cuda":
        return "compiled blocks are benchmarked on CUDA only (worldtune generate compiles on CUDA only)"
    if state.get("compiled") and not compiled:
        return "runs uncompiled, but an earlier variant compiled the blocks: put it earlier in --variants"
    if attention is not None or state.get("pinned"):
        set_attention(pipe.transformer, attention)  # None: back to PyTorch's choice
        state["pinned"] = True
    if name in VAE_CHANNELS_LAST and not state.get("vae_channels_last"):
        from worldtune.models.vae_modes import apply_vae_mode

        apply_vae_mode(pipe.vae, "channels_last")
        state["vae_channels_last"] = True
    if name in VAE_COMPILED and not state.get("vae_compiled"):
        if device.type != "cuda":
            return "the compiled VAE decoder is benchmarked on CUDA only"
        pipe.vae.decoder.compile()
        state["vae_compiled"] = True
    if compiled and not state.get("compiled"):
        # what `worldtune generate` does after loading adapters (infer/generate.py _speed_up)
        apply_speed(pipe.transformer, fused_adaln=False, compile=True, attention=attention,
                    dynamic=family.compile_dynamic)
        state["compiled"] = True
    return None


def psnr(a: np.ndarray, b: np.ndarray) -> float | None:
    mse = float(np.mean((a.astype(np.float64) - b) ** 2))
    return round(10 * np.log10(1.0 / mse), 2) if mse > 0 else None


def bench_generation(args, spec, family, device: torch.device, dtype: torch.dtype) -> tuple[list[dict], dict]:
    import worldtune.models.frames as frames_module

    torch.manual_seed(args.seed)
    pipe = family.build_pipeline(str(device), dtype)
    keep_fp32_modules(pipe.transformer)
    pipe.set_progress_bar_config(disable=True)
    image = np.random.default_rng(args.seed).integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
    timer = ForwardTimer(pipe.transformer, device)
    rows, ref, state, default_kernel = [], None, {}, None
    for name in args.variants.split(","):
        if name not in GEN_VARIANTS:
            raise SystemExit(f"unknown generation variant {name!r}: choose from {', '.join(GEN_VARIANTS)}")
        _, compiled, attention = GEN_VARIANTS[name]
        if compiled and attention is not None and attention == default_kernel:
            why = f"{attention} is PyTorch's own choice here (pipeline_{attention} equals pipeline bit for bit): see fast"
        else:
            why = switch_on(pipe, family, name, state, device)
        if why:
            print(f"skip {name}: {why}")
            rows.append({"variant": name, "skipped": why})
            continue
        try:
            t0 = time.perf_counter()
            # warm-up (compilation, kernel loading): a whole 1-step video first, then the transformer alone
            generate_once(name, pipe, family, args, image, 1, latent=ref is not None and name not in VAE_COMPILED | VAE_CHANNELS_LAST)
            warm = time.perf_counter() - t0
            timer.times.clear()
            enc, dec = [], []
            reset_peak(device)
            sync(device)
            t0 = time.perf_counter()
            with timed(pipe.vae, "encode", enc, device), timed(pipe.vae, "decode", dec, device), \
                    timed(frames_module, "decode_to_frames", dec, device):
                video = generate_once(name, pipe, family, args, image, args.steps)
            sync(device)
            seconds = time.perf_counter() - t0
            video, host_uint8_s = as_uint8(video)
        except Exception as e:  # noqa: BLE001 -- a kernel this PyTorch lacks for these shapes: record it, run the rest
            print(f"{name} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            rows.append({"variant": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
            continue
        ref = video if ref is None else ref
        if not compiled and attention is not None and np.array_equal(video, ref):
            default_kernel = attention
        first = next((r for r in rows if "seconds_per_video" in r), None)
        rows.append({
            "variant": name, "seconds_per_video": round(seconds, 3), "warmup_s": round(warm, 2),
            "speedup_vs_first": round(first["seconds_per_video"] / seconds, 3) if first else 1.0,
            "transformer_calls": len(timer.times), "transformer_ms_per_call": round(1e3 * float(np.mean(timer.times)), 2),
            "transformer_s": round(sum(timer.times), 3), "vae_encode_s": round(sum(enc), 3),
            "vae_decode_s": round(sum(dec), 3), "host_uint8_s_untimed": round(host_uint8_s, 3),
            "peak_mem_gib": peak_gib(device),
            "max_abs_diff_vs_first": float(np.abs(video.astype(np.int16) - ref).max()) / 255,
            "mean_abs_diff_vs_first": float(np.abs(video.astype(np.int16) - ref).mean()) / 255,
            "psnr_vs_first_db": psnr(video / 255.0, ref / 255.0), "output": "uint8 frames",
        })
        print({k: v for k, v in rows[-1].items()}, flush=True)
    timer.remove()
    tokens = family.encode_prompts(pipe, [PROMPT], "tokens", num_frames=args.train_frames, height=args.height,
                                   width=args.width, fps=float(spec.fps))
    return rows, {"tokens": tokens}


# -------------------------------------------------------------------------------------------- training
def bench_training(args, spec, family, device: torch.device, dtype: torch.dtype, tokens: torch.Tensor) -> list[dict]:
    from worldtune.models.cosmos3 import PAD_ID, recipe_objective
    from worldtune.models.speed import (
        apply_selective_checkpointing,
        apply_speed,
        repeated_blocks,
        set_attention,
    )
    from worldtune.train.adapters import apply_training_mode
    from worldtune.train.flow import FlowMatchingLoss

    h, w, f = args.height, args.width, args.train_frames
    torch.manual_seed(args.seed)
    model = keep_fp32_modules(family.build_transformer(device, dtype))
    lora = SimpleNamespace(rank=args.rank, alpha=args.alpha, dropout=0.0, targets=None, init="default")
    params = apply_training_mode(model, "lora", lora, family)
    if getattr(args, "fp8", False):  # train.fp8: torchao's float8 training of the frozen base linears
        from worldtune.models.float8 import float8_training

        float8_training(model, device, "train.fp8")
    if args.checkpoint == "selective":
        apply_selective_checkpointing(model, list(range(len(repeated_blocks(model)))))
    opt = torch.optim.AdamW(params, lr=1e-4, fused=device.type == "cuda")
    objective = FlowMatchingLoss(**{**recipe_objective(h, w), "text_dropout": 0.0})
    t, lh, lw = family.latent_size(f, h, w)
    x0 = torch.randn(1, int(spec.transformer["latent_channel"]), t, lh, lw,
                     generator=torch.Generator().manual_seed(args.seed)).to(device)
    text_tokens = int((tokens[0, 0] != PAD_ID).sum())
    trainer_flops = family.train_flops_per_sample(f, h, w, False)
    exact_flops = 3.0 * family.forward_flops(f, h, w, text_tokens=text_tokens, cond_frames=1).total
    env_peak = float(os.environ.get("WORLDTUNE_PEAK_TFLOPS", "790"))
    n_params = sum(p.numel() for p in params)

    def step(i: int) -> float:
        batch = objective.prepare(x0, [args.seed + i], num_cond=[1])
        loss = objective.loss(family.predict(model, batch, tokens, dtype, float(spec.fps)), batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    rows, compiled = [], False
    for name in [v for v in args.train_variants.split(",") if v]:
        if name not in TRAIN_VARIANTS:
            raise SystemExit(f"unknown training variant {name!r}: choose from {', '.join(TRAIN_VARIANTS)}")
        want_compile, attention = TRAIN_VARIANTS[name]
        if device.type != "cuda" and (want_compile or attention in ("cudnn", "flash")):
            rows.append({"variant": name, "skipped": "needs CUDA"})
            continue
        if compiled and not want_compile:
            rows.append({"variant": name, "skipped": "an earlier variant compiled the blocks: put it earlier"})
            continue
        try:
            if want_compile and not compiled:
                apply_speed(model, fused_adaln=False, compile=True, attention=attention, dynamic=family.compile_dynamic)
                compiled = True
            elif attention is not None:
                set_attention(model, attention)
            t0 = time.perf_counter()
            for i in range(2):  # warm-up: compilation, autotuning, optimizer state
                step(i)
            sync(device)
            warm = time.perf_counter() - t0
            reset_peak(device)
            losses, times = [], []
            for i in range(args.train_steps):
                sync(device)
                t0 = time.perf_counter()
                losses.append(step(100 + i))
                sync(device)
                times.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 -- record the failure, run the other variants
            print(f"training {name} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            rows.append({"variant": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
            continue
        s = float(np.median(times))
        rows.append({
            "variant": name, "frames": f, "height": h, "width": w, "latent": [t, lh, lw],
            "video_tokens": t * -(-lh // family.patch) * -(-lw // family.patch), "text_tokens": text_tokens,
            "lora_rank": args.rank, "lora_alpha": args.alpha, "lora_params": n_params, "checkpoint": args.checkpoint,
            "s_per_step": round(s, 4), "step_times_s": [round(x, 4) for x in times], "warmup_s": round(warm, 2),
            "train_flops_per_sample": trainer_flops, "exact_step_flops": exact_flops,
            "mfu_989": round(trainer_flops / s / (H200_PEAK_TFLOPS * 1e12), 4),
            "mfu_exact_989": round(exact_flops / s / (H200_PEAK_TFLOPS * 1e12), 4),
            f"mfu_{env_peak:g}": round(trainer_flops / s / (env_peak * 1e12), 4),
            "peak_mem_gib": peak_gib(device), "losses": [round(x, 4) for x in losses],
        })
        print(rows[-1], flush=True)
    return rows


# ---------------------------------------------------------------------------------------------- report
def main() -> None:
    args = parse()
    device, dtype, spec, family = setup(args)
    t_start = time.perf_counter()
    gen_rows, extra = bench_generation(args, spec, family, device, dtype)
    t_gen = time.perf_counter() - t_start
    torch._dynamo.reset()  # drop the generation graphs (and their hold on the generation model)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    train_rows = bench_training(args, spec, family, device, dtype, extra["tokens"])
    report(args, spec, device, gen_rows, train_rows, t_gen, time.perf_counter() - t_start)


def report(args, spec, device: torch.device, gen: list[dict], train: list[dict], t_gen: float, t_all: float) -> None:
    import diffusers

    meta = {
        "spec": spec.name, "mode": "image2world", "frames": args.frames, "height": args.height, "width": args.width,
        "steps": args.steps, "guidance": args.guidance, "seed": args.seed, "fps": spec.fps,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "diffusers": diffusers.__version__, "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "generation_wall_s": round(t_gen, 1), "total_wall_s": round(t_all, 1),
    }
    ok = [r for r in gen if "seconds_per_video" in r]
    floor = {r["variant"]: r["mean_abs_diff_vs_first"] for r in ok if r["variant"].startswith("pipeline_")}
    fast = [r for r in ok if r["variant"].startswith("fast")]
    best = min(fast, key=lambda r: r["seconds_per_video"]) if fast else None
    summary = {"noise_floor_mean_abs_diff": floor,
               "best_worldtune": None if best is None else {k: best[k] for k in (
                   "variant", "seconds_per_video", "speedup_vs_first", "max_abs_diff_vs_first", "mean_abs_diff_vs_first")}}
    print(f"\n{spec.name} image2world {args.frames}x{args.height}x{args.width}, {args.steps} steps, guidance "
          f"{args.guidance:g} on {meta['device']}")
    print(f"{'variant':16s} {'s/video':>8s} {'speedup':>8s} {'calls':>6s} {'ms/call':>8s} {'enc s':>6s} {'dec s':>6s} "
          f"{'peak GiB':>8s} {'max|d|':>9s} {'mean|d|':>9s} {'PSNR':>6s}")
    for r in gen:
        if "seconds_per_video" not in r:
            print(f"{r['variant']:16s} {r.get('skipped') or r.get('error')}")
            continue
        print(f"{r['variant']:16s} {r['seconds_per_video']:8.2f} {r['speedup_vs_first']:7.2f}x {r['transformer_calls']:6d} "
              f"{r['transformer_ms_per_call']:8.1f} {r['vae_encode_s']:6.2f} {r['vae_decode_s']:6.2f} "
              f"{'-' if r['peak_mem_gib'] is None else r['peak_mem_gib']:>8} {r['max_abs_diff_vs_first']:9.2e} "
              f"{r['mean_abs_diff_vs_first']:9.2e} {'-' if r['psnr_vs_first_db'] is None else r['psnr_vs_first_db']:>6}")
    print(f"\nLoRA training step, {args.train_frames}x{args.height}x{args.width}, rank {args.rank}, "
          f"checkpoint {args.checkpoint}")
    for r in train:
        if "s_per_step" not in r:
            print(f"{r['variant']:16s} {r.get('skipped') or r.get('error')}")
            continue
        print(f"{r['variant']:16s} {r['s_per_step']:.3f} s/step  MFU {100 * r['mfu_989']:.1f}% of 989 TFLOP/s "
              f"(exact text length: {100 * r['mfu_exact_989']:.1f}%)  peak {r['peak_mem_gib']} GiB  "
              f"tokens {r['video_tokens']}+{r['text_tokens']}  losses {r['losses']}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"meta": meta, "generation": gen, "generation_summary": summary,
                                           "training": train}, indent=1))
    print(f"wrote {args.json} ({t_all:.0f} s)")


if __name__ == "__main__":
    main()
