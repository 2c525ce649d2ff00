"""Generation speed, side by side: the diffusers pipeline vs worldtune's sampler (batched guidance, compile).

Builds a random-initialised Cosmos-Predict2.5 2B (transformer + Wan VAE from the registry, in bf16
on CUDA; the 7B text encoder is skipped and replaced by random prompt embeddings of the real shape
[1, 512, 100352]) and generates one image2world video three ways with the same seed:

  (a) pipeline  - Cosmos2_5_PredictBasePipeline.__call__ with prompt_embeds (2 DiT calls per step)
  (b) batched   - worldtune.infer.sampler, cond and uncond in one batch-2 DiT call per step
  (c) compiled  - (b) with every transformer block torch.compile'd (CUDA only)

It reports seconds per video, DiT forward time, VAE decode time, peak GPU memory, and the max abs
difference of each video from (a). Each variant runs once untimed (warm-up: cuDNN autotuning,
compilation) with 2 steps, then timed.

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


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny spec on any device (smoke test)")
    p.add_argument("--steps", type=int, default=36)
    p.add_argument("--frames", type=int, default=None, help="default 93 (tiny: 5)")
    p.add_argument("--height", type=int, default=None, help="default 432 (tiny: 32)")
    p.add_argument("--width", type=int, default=None, help="default 768 (tiny: 48)")
    p.add_argument("--guidance", type=float, default=7.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default="pipeline,batched,compiled")
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
def timed_decode(pipe, sink: list[float], device: torch.device):
    """Time vae.decode calls made inside the block (the pipeline calls it internally)."""
    orig = pipe.vae.decode

    def wrapped(*a, **k):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = orig(*a, **k)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        sink.append(time.perf_counter() - t0)
        return out

    pipe.vae.decode = wrapped
    try:
        yield
    finally:
        pipe.vae.decode = orig


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
    """One video; returns (video float [T,H,W,3], seconds, forward times, decode times)."""
    from PIL import Image

    from worldtune.infer import sampler
    from worldtune.infer.generate import initial_noise

    h, w, f = args.height, args.width, args.frames
    noise = initial_noise(args.seed, (1, 16, (f - 1) // 4 + 1, h // 8, w // 8))
    decode_s: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    with timed_decode(pipe, decode_s, device):
        if name == "pipeline":
            video = pipe(image=Image.fromarray(frames[0]), prompt_embeds=pos, negative_prompt_embeds=neg, latents=noise,
                         height=h, width=w, num_frames=f, num_inference_steps=steps, guidance_scale=args.guidance,
                         output_type="np").frames[0]
        else:
            cond = sampler.prepare(pipe, frames, noise, f, h, w)
            latents = sampler.denoise(pipe, cond, pos, neg, steps, args.guidance, batch_guidance=True)
            video = sampler.decode(pipe, latents, f)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return video, time.perf_counter() - t0, decode_s


def main() -> None:
    args = parse()
    args.frames = args.frames or (5 if args.tiny else 93)
    args.height = args.height or (32 if args.tiny else 432)
    args.width = args.width or (48 if args.tiny else 768)
    device = torch.device(args.device)
    pipe, spec, pos, neg = build(args, device)
    timer = ForwardTimer(pipe.transformer, device)
    frames = np.random.default_rng(args.seed).integers(0, 256, (1, args.height, args.width, 3), dtype=np.uint8)

    results, ref = [], None
    for name in args.variants.split(","):
        if name == "compiled":
            if device.type != "cuda":
                print("skip compiled: regional compile is benchmarked on CUDA only")
                continue
            from worldtune.infer.speed import compile_blocks

            compile_blocks(pipe.transformer)
        run_variant(name, pipe, args, frames, pos, neg, min(2, args.steps), device)  # warm-up
        timer.times.clear()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        video, seconds, decode_s = run_variant(name, pipe, args, frames, pos, neg, args.steps, device)
        ref = video if ref is None else ref
        results.append({
            "variant": name, "seconds_per_video": round(seconds, 3),
            "dit_calls": len(timer.times), "dit_forward_ms": round(1e3 * float(np.mean(timer.times)), 2),
            "dit_ms_per_step": round(1e3 * sum(timer.times) / args.steps, 2),
            "vae_decode_s": round(sum(decode_s), 3),
            "peak_mem_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
            "max_abs_diff_vs_first": float(np.abs(video - ref).max()),
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
    cols = ["variant", "s/video", "DiT calls", "DiT fwd ms", "DiT ms/step", "VAE decode s", "peak GiB", "max|diff| vs first"]
    for c in cols:
        table.add_column(c, justify="left" if c == "variant" else "right")
    for r in results:
        table.add_row(r["variant"], f"{r['seconds_per_video']:.2f}", str(r["dit_calls"]), f"{r['dit_forward_ms']:.1f}",
                      f"{r['dit_ms_per_step']:.1f}", f"{r['vae_decode_s']:.2f}",
                      "-" if r["peak_mem_gib"] is None else f"{r['peak_mem_gib']:.1f}",
                      f"{r['max_abs_diff_vs_first']:.2e}")
    Console(width=140).print(table)
    Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
