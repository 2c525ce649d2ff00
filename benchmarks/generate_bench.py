"""Generation speed, side by side: the diffusers pipeline vs worldtune's sampler and its speed switches.

Builds a random-initialised Cosmos-Predict2.5 2B (transformer + Wan VAE from the registry, in bf16
on CUDA; the 7B text encoder is skipped and replaced by random prompt embeddings of the real shape
[1, 512, 100352]) and generates one image2world video several ways with the same seed:

  pipeline  Cosmos2_5_PredictBasePipeline.__call__ with prompt_embeds (2 DiT calls per step, VAE-encodes
            the whole image-plus-black video)
  pipeline_flash  the same with SDPA pinned to the flash kernel instead of PyTorch's pick (cuDNN on an
            H200): another correct bf16 attention, so its difference from `pipeline` is the bf16 noise
            floor against which the other variants' differences are read
  batched   worldtune.models.predict_sampler: cond and uncond in one batch-2 DiT call per step, only the
            conditioning frame VAE-encoded
  fused     + per-frame adaLN (models/speed.py)
  fast      + every transformer block torch.compile'd (CUDA only): what `worldtune generate` runs on CUDA
  fast_b1   fast with the two guidance branches as two batch-1 calls (generate.batch_guidance = false)

Switches stay on once applied, so variants run in the order given and each adds to the last
(`--variants` may leave some out). It reports seconds per video, DiT forward time, VAE encode and
decode time, peak GPU memory, and the max abs difference of each video from the first variant's.
Each variant runs once untimed with 2 steps (warm-up: cuDNN autotuning, compilation), then timed.

    python benchmarks/generate_bench.py                      # real size, CUDA: 93x432x768, 36 steps
    python benchmarks/generate_bench.py --tiny --steps 2     # CPU smoke test on the tiny spec
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch


# variant -> (worldtune sampler, batch guidance, fused adaLN, compiled blocks, SDPA kernel pinned)
VARIANTS = {"pipeline": (False, False, False, False, None), "pipeline_flash": (False, False, False, False, "flash"),
            "batched": (True, True, False, False, None), "fused": (True, True, True, False, None),
            "fast": (True, True, True, True, None), "fast_b1": (True, False, True, True, None)}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny spec on any device (smoke test)")
    p.add_argument("--steps", type=int, default=36)
    p.add_argument("--frames", type=int, default=None, help="default 93 (tiny: 5)")
    p.add_argument("--height", type=int, default=None, help="default 432 (tiny: 32)")
    p.add_argument("--width", type=int, default=None, help="default 768 (tiny: 48)")
    p.add_argument("--guidance", type=float, default=7.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default="generate_bench.json", help="where to write the results")
    return p.parse_args()


class ForwardTimer:
    """Times every transformer forward (synchronising CUDA), via hooks that change nothing else."""

    def __init__(self, module: torch.nn.Module, device: torch.device) -> None:
        self.device, self.times, self._t0 = device, [], 0.0
        module.register_forward_pre_hook(lambda *_: self._start())
        module.register_forward_hook(lambda *_: self._stop())

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _start(self) -> None:
        self._sync()
        self._t0 = time.perf_counter()

    def _stop(self) -> None:
        self._sync()
        self.times.append(time.perf_counter() - self._t0)


@contextmanager
def timed(module, method: str, sink: list[float], device: torch.device):
    """Time `module.<method>` calls made inside the block (the pipeline calls the VAE internally)."""
    orig = getattr(module, method)

    def wrapped(*a, **k):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = orig(*a, **k)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        sink.append(time.perf_counter() - t0)
        return out

    setattr(module, method, wrapped)
    try:
        yield
    finally:
        setattr(module, method, orig)


def build(args: argparse.Namespace, device: torch.device):
    """A pipeline of random weights without a text encoder (prompts come as embeddings)."""
    from diffusers import Cosmos2_5_PredictBasePipeline

    from worldtune.models.build import NoOpSafetyChecker, build_scheduler, build_transformer, build_vae
    from worldtune.models.registry import get_spec

    spec = get_spec("tiny-predict2.5" if args.tiny else "cosmos-predict2.5-2b")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(args.seed)
    pipe = Cosmos2_5_PredictBasePipeline(
        text_encoder=None, tokenizer=None, transformer=build_transformer(spec, device, dtype),
        vae=build_vae(spec, device, dtype), scheduler=build_scheduler(spec), safety_checker=NoOpSafetyChecker())
    pipe.set_progress_bar_config(disable=True)
    g = torch.Generator("cpu").manual_seed(args.seed + 1)
    shape = (1, spec.max_sequence_length, spec.text_embed_dim)
    pos = torch.randn(shape, generator=g).to(device, dtype)
    neg = torch.randn(shape, generator=g).to(device, dtype)
    return pipe, spec, pos, neg


def run_variant(name: str, pipe, args, frames: np.ndarray, pos, neg, steps: int, device: torch.device):
    """One video; returns (video float [T,H,W,3], seconds, VAE encode times, VAE decode times)."""
    from PIL import Image

    from worldtune.models import predict_sampler as sampler
    from worldtune.infer.generate import initial_noise

    h, w, f = args.height, args.width, args.frames
    noise = initial_noise(args.seed, (1, 16, (f - 1) // 4 + 1, h // 8, w // 8))
    ours, batch, *_, attention = VARIANTS[name]
    encode_s: list[float] = []
    decode_s: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    from worldtune.models.speed import set_attention

    set_attention(pipe.transformer, attention)  # the DiT's blocks only: the VAE's heads (384) have no flash kernel
    with timed(pipe.vae, "encode", encode_s, device), timed(pipe.vae, "decode", decode_s, device):
        if not ours:
            video = pipe(image=Image.fromarray(frames[0]), prompt_embeds=pos, negative_prompt_embeds=neg, latents=noise,
                         height=h, width=w, num_frames=f, num_inference_steps=steps, guidance_scale=args.guidance,
                         output_type="np").frames[0]
        else:
            cond = sampler.prepare(pipe, frames, noise, f, h, w)
            latents = sampler.denoise(pipe, cond, pos, neg, steps, args.guidance, batch_guidance=batch)
            video = sampler.decode(pipe, latents, f)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return video, time.perf_counter() - t0, encode_s, decode_s


def switch_on(pipe, name: str, applied: set[str], device: torch.device) -> bool:
    """Apply the variant's speed switches (they cannot be undone); False if it cannot run here."""
    from worldtune.models.speed import compile_blocks, fuse_adaln_per_frame

    _, _, fused, compiled, attention = VARIANTS[name]
    if attention in ("cudnn", "flash") and device.type != "cuda":
        print(f"skip {name}: SDPA {attention} needs CUDA")
        return False
    if compiled and device.type != "cuda":
        print(f"skip {name}: regional compile is benchmarked on CUDA only")
        return False
    for switch, wanted, apply in (("fused", fused, fuse_adaln_per_frame), ("compile", compiled, compile_blocks)):
        if wanted and switch not in applied:
            apply(pipe.transformer)
            applied.add(switch)
        elif not wanted and switch in applied:
            raise SystemExit(f"variant {name} runs without {switch}, which an earlier variant applied: reorder --variants")
    return True


def psnr(a: np.ndarray, b: np.ndarray) -> float | None:
    """PSNR of two [0, 1] videos in dB (None when identical)."""
    mse = float(np.mean((a.astype(np.float64) - b) ** 2))
    return round(10 * np.log10(1.0 / mse), 2) if mse > 0 else None


def main() -> None:
    args = parse()
    args.frames = args.frames or (5 if args.tiny else 93)
    args.height = args.height or (32 if args.tiny else 432)
    args.width = args.width or (48 if args.tiny else 768)
    device = torch.device(args.device)
    pipe, spec, pos, neg = build(args, device)
    timer = ForwardTimer(pipe.transformer, device)
    frames = np.random.default_rng(args.seed).integers(0, 256, (1, args.height, args.width, 3), dtype=np.uint8)

    results, ref, applied = [], None, set()
    for name in args.variants.split(","):
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}: choose from {', '.join(VARIANTS)}")
        if not switch_on(pipe, name, applied, device):
            continue
        run_variant(name, pipe, args, frames, pos, neg, min(2, args.steps), device)  # warm-up
        timer.times.clear()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        video, seconds, encode_s, decode_s = run_variant(name, pipe, args, frames, pos, neg, args.steps, device)
        ref = video if ref is None else ref
        results.append({
            "variant": name, "seconds_per_video": round(seconds, 3),
            "dit_calls": len(timer.times), "dit_forward_ms": round(1e3 * float(np.mean(timer.times)), 2),
            "dit_ms_per_step": round(1e3 * sum(timer.times) / args.steps, 2),
            "vae_encode_s": round(sum(encode_s), 3), "vae_decode_s": round(sum(decode_s), 3),
            "peak_mem_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
            "max_abs_diff_vs_first": float(np.abs(video - ref).max()),
            "mean_abs_diff_vs_first": float(np.abs(video - ref).mean()),
            "psnr_vs_first_db": psnr(video, ref),
            "speedup_vs_first": round(results[0]["seconds_per_video"] / seconds, 3) if results else 1.0,
        })
    report(args, spec, device, results)


def report(args, spec, device: torch.device, results: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    import diffusers

    meta = {
        "spec": spec.name, "frames": args.frames, "height": args.height, "width": args.width, "steps": args.steps,
        "guidance": args.guidance, "seed": args.seed, "device": torch.cuda.get_device_name(device)
        if device.type == "cuda" else platform.processor() or "cpu", "torch": torch.__version__,
        "diffusers": diffusers.__version__, "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    table = Table(title=f"{spec.name} {args.frames}x{args.height}x{args.width}, {args.steps} steps, "
                        f"guidance {args.guidance:g} on {meta['device']}")
    cols = ["variant", "s/video", "speed-up", "DiT calls", "DiT fwd ms", "DiT ms/step", "VAE enc s", "VAE dec s",
            "peak GiB", "max|diff|", "mean|diff|", "PSNR dB"]
    for c in cols:
        table.add_column(c, justify="left" if c == "variant" else "right")
    for r in results:
        table.add_row(r["variant"], f"{r['seconds_per_video']:.2f}", f"{r['speedup_vs_first']:.2f}x", str(r["dit_calls"]),
                      f"{r['dit_forward_ms']:.1f}", f"{r['dit_ms_per_step']:.1f}", f"{r['vae_encode_s']:.2f}",
                      f"{r['vae_decode_s']:.2f}",
                      "-" if r["peak_mem_gib"] is None else f"{r['peak_mem_gib']:.1f}",
                      f"{r['max_abs_diff_vs_first']:.2e}", f"{r['mean_abs_diff_vs_first']:.2e}",
                      "-" if r["psnr_vs_first_db"] is None else f"{r['psnr_vs_first_db']:.1f}")
    Console(width=180).print(table)
    Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
