"""Where a Cosmos 3 Edge video's time goes: VAE decode settings, the postprocess, and the transformer calls.

Profiles what `cosmos3_bench.py` reports as one number per part, on the same random-initialised
`cosmos3-edge` (bf16 transformer with its fp32 `time_embedder`, bf16 Wan2.2 VAE):

(a) VAE decode of one 93x480x832 latent video as the pipeline decodes it (un-normalise, `vae.decode`,
    float32), under each decoder setting: PyTorch's defaults, `torch.backends.cudnn.benchmark`,
    channels-last-3D weights, and both. Median of 3 timed decodes after one warm-up; max / mean abs
    difference of the decoded pixels from the default setting's; FLOPs counted by FlopCounterMode.
(b) The postprocess to uint8 frames: the pipeline's (denormalise on the GPU, float32 to the host,
    `to_uint8` in NumPy) against the same arithmetic on the GPU with only uint8 copied to the host,
    and whether the two are equal.
(c) The transformer calls of a compiled (`fast`) sampling run, timed with CUDA events that add no
    synchronisation: per call the part before the first decoder layer, the 28 layers, and the part after;
    the GPU idle gaps between calls (scheduler step, host work); then `torch.profiler` on one sampling
    step, top CUDA kernels by time.

    python benchmarks/cosmos3_profile.py --json $OUT/cosmos3_profile.json   # one H200 (~3 min)
    python benchmarks/cosmos3_profile.py --tiny                              # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosmos3_bench import PROMPT, keep_fp32_modules, setup, sync  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--steps", type=int, default=3, help="sampling steps of the timed transformer run")
    p.add_argument("--parts", default="vae,post,transformer")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default="cosmos3_profile.json")
    a = p.parse_args()
    a.frames, a.height, a.width = (9, 32, 48) if a.tiny else (93, 480, 832)
    return a


def median_time(fn, device, reps: int = 3) -> tuple[float, list[float], object]:
    out, times = None, []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times, out


# ----------------------------------------------------------------------------------------- (a), (b)
def decode_like_pipeline(pipe, latents: torch.Tensor) -> torch.Tensor:
    """Cosmos3OmniPipeline.__call__'s decode: latents [C, T, H, W] float32 -> pixels [1, 3, F, H, W] float32."""
    dtype = pipe.vae.dtype
    mean = pipe._vae_latents_mean.to(device=latents.device, dtype=dtype)
    inv_std = pipe._vae_latents_inv_std.to(device=latents.device, dtype=dtype)
    z = latents.to(dtype) / inv_std.view(1, -1, 1, 1, 1) + mean.view(1, -1, 1, 1, 1)
    return pipe.vae.decode(z).sample.to(latents.dtype)


def profile_vae(pipe, args, device) -> tuple[list[dict], torch.Tensor]:
    from torch.utils.flop_counter import FlopCounterMode

    from worldtune.models.vae_modes import _channels_last

    t, h, w = (args.frames - 1) // 4 + 1, args.height // 16, args.width // 16
    latents = torch.randn(48, t, h, w, generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        ref = decode_like_pipeline(pipe, latents)
    flops = fc.get_total_flops()
    rows = []
    for name, bench, cl in (("default", False, False), ("cudnn_benchmark", True, False),
                            ("channels_last", False, True), ("channels_last+benchmark", True, True)):
        torch.backends.cudnn.benchmark = bench
        if cl:
            _channels_last(pipe.vae)
        with torch.no_grad():
            decode_like_pipeline(pipe, latents)  # warm-up (cuDNN autotuning with benchmark)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            s, times, out = median_time(lambda: decode_like_pipeline(pipe, latents), device)
        d = (out - ref).abs()
        rows.append({"setting": name, "decode_s": round(s, 3), "times": [round(x, 3) for x in times],
                     "tflops": round(flops / s / 1e12, 1), "max_abs_diff": float(d.max()), "mean_abs_diff": float(d.mean()),
                     "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None})
        print(rows[-1], flush=True)
        if cl:  # back to the default layout for the next setting
            for p in pipe.vae.parameters():
                p.data = p.data.contiguous()
    torch.backends.cudnn.benchmark = False
    print(f"decode FLOPs {flops / 1e12:.1f} TFLOP", flush=True)
    return rows, ref


def profile_post(pipe, decoded: torch.Tensor, device) -> dict:
    from worldtune.models.latents import to_uint8

    def pipeline_way():
        return to_uint8(pipe.video_processor.postprocess_video(decoded, output_type="np")[0])

    def host_float():
        return pipe.video_processor.postprocess_video(decoded, output_type="np")[0]

    def gpu_way():
        x = (decoded[0] * 0.5 + 0.5).clamp(0, 1)
        return (x * 255.0).round().to(torch.uint8).permute(1, 2, 3, 0).cpu().numpy()

    s_pipe, _, a = median_time(pipeline_way, device)
    s_float, _, _ = median_time(host_float, device)
    s_gpu, _, b = median_time(gpu_way, device)
    row = {"pipeline_float_to_host_s": round(s_float, 3), "pipeline_plus_to_uint8_s": round(s_pipe, 3),
           "gpu_uint8_s": round(s_gpu, 3), "equal": bool(np.array_equal(a, b)),
           "max_abs_diff": int(np.abs(a.astype(np.int16) - b).max())}
    print(row, flush=True)
    return row


# --------------------------------------------------------------------------------------------- (c)
class CallEvents:
    """CUDA events at the transformer's start, first layer, after the last layer and end (no syncs)."""

    def __init__(self, transformer, device):
        self.device, self.marks = device, []
        self.transformer = transformer
        stack = transformer._run_decoder_stack  # not compiled (the layers inside it are): events are safe here

        def timed_stack(*a, **k):
            self._mark("layers")
            out = stack(*a, **k)
            self._mark("tail")
            return out

        transformer._run_decoder_stack = timed_stack
        self.handles = [
            transformer.register_forward_pre_hook(lambda *_: self._mark("start")),
            transformer.register_forward_hook(lambda *_: self._mark("end")),
        ]

    def _mark(self, what: str) -> None:
        if self.device.type == "cuda":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
        else:
            e = time.perf_counter()
        self.marks.append((what, e))

    def summary(self) -> dict:
        sync(self.device)

        def ms(a, b):
            return a.elapsed_time(b) if self.device.type == "cuda" else 1e3 * (b - a)

        calls, gaps, prev_end = [], [], None
        for i in range(0, len(self.marks) - 3, 4):
            (_, s), (_, ly), (_, tl), (_, e) = self.marks[i:i + 4]
            calls.append((ms(s, ly), ms(ly, tl), ms(tl, e)))
            if prev_end is not None:
                gaps.append(ms(prev_end, s))
            prev_end = e
        c = np.array(calls)
        out = {"calls": len(calls), "before_layers_ms": round(float(c[:, 0].mean()), 2),
               "layers_ms": round(float(c[:, 1].mean()), 2), "after_layers_ms": round(float(c[:, 2].mean()), 2),
               "gap_between_calls_ms": [round(g, 2) for g in gaps]}
        for h in self.handles:
            h.remove()
        del self.transformer._run_decoder_stack
        return out


def sample_latents(pipe, family, args, image, steps: int):
    s = SimpleNamespace(mode="image2world", height=args.height, width=args.width, num_frames=args.frames,
                        fps=float(family.spec.fps), steps=steps, guidance=6.0, negative_prompt=None, cond_latent_frames=1)
    from PIL import Image

    from worldtune.models.cosmos3 import encode_leading_frames, template_flags

    with encode_leading_frames(pipe, 1):
        return pipe(PROMPT, image=Image.fromarray(image), num_frames=s.num_frames, height=s.height, width=s.width,
                    fps=s.fps, num_inference_steps=steps, guidance_scale=s.guidance,
                    generator=torch.Generator("cpu").manual_seed(0), output_type="latent", **template_flags(PROMPT)).video


def profile_transformer(pipe, family, args, device) -> dict:
    from worldtune.models.speed import apply_speed

    image = np.random.default_rng(0).integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
    if device.type == "cuda":
        apply_speed(pipe.transformer, fused_adaln=False, compile=True, dynamic=family.compile_dynamic)
    t0 = time.perf_counter()
    sample_latents(pipe, family, args, image, 2)  # compile both guidance shapes
    out = {"warmup_s": round(time.perf_counter() - t0, 1)}
    ev = CallEvents(pipe.transformer, device)
    sync(device)
    t0 = time.perf_counter()
    sample_latents(pipe, family, args, image, args.steps)
    sync(device)
    out["latent_run_s"] = round(time.perf_counter() - t0, 3)
    out["steps"] = args.steps
    out.update(ev.summary())
    print({k: v for k, v in out.items()}, flush=True)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        sample_latents(pipe, family, args, image, 1)
        sync(device)
    key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=70)
    print(table, flush=True)
    out["profile_table"] = table
    return out


def main() -> None:
    args = parse()
    device, dtype, spec, family = setup(args)
    torch.manual_seed(0)
    pipe = family.build_pipeline(str(device), dtype)
    keep_fp32_modules(pipe.transformer)
    pipe.set_progress_bar_config(disable=True)
    parts = args.parts.split(",")
    res: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                 "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M %Z")}
    decoded = None
    if "vae" in parts:
        res["vae_decode"], decoded = profile_vae(pipe, args, device)
    if "post" in parts and decoded is not None:
        res["postprocess"] = profile_post(pipe, decoded, device)
    del decoded
    if "transformer" in parts:
        res["transformer"] = profile_transformer(pipe, family, args, device)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(res, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
