"""How the VAE runs while it encodes a whole dataset: eager, compiled, channels-last or tiled.

The cache encodes every clip once, and at 93x432x768 one Wan2.1 encode costs about a second on an
H200, so for tens of thousands of clips the way the VAE runs is hours of GPU time. Each mode keeps
the same weights and the same `encode` call; only the execution changes:

    eager          the module as diffusers builds it
    compile        the encoder compiled with torch.compile (the first clip pays the compilation)
    channels_last  weights in channels-last 3D memory format (cuDNN's preferred layout for conv3d)
    tiled          diffusers' spatial tiling (`enable_tiling`): less memory, blended tile seams

`benchmarks/vae_encode_bench.py` times each mode and compares its latents with eager's; a mode is
accepted when its difference from eager bf16 is within the bf16 noise floor (eager bf16 vs fp32).
`CUDA_MODE` is what `cache.vae_mode = "auto"` runs on CUDA; on a CPU, auto is eager.
"""

from __future__ import annotations

import torch

VAE_MODES = ("eager", "compile", "channels_last", "tiled")
# the fastest accepted mode of benchmarks/results/vae_encode_bench.json ("chosen"): one H200, 2026-12-03
CUDA_MODE = "channels_last"


def resolve_vae_mode(mode: str, device: str | torch.device) -> str:
    """'auto' -> the measured choice on CUDA, eager elsewhere; other names are checked and returned."""
    if mode == "auto":
        return CUDA_MODE if torch.device(device).type == "cuda" else "eager"
    if mode not in VAE_MODES:
        raise ValueError(f"unknown VAE mode {mode!r}: choose one of auto, {', '.join(VAE_MODES)}")
    return mode


def apply_vae_mode(vae, mode: str):
    """Switch `vae` (an AutoencoderKLWan) to `mode` in place and return it."""
    if mode == "compile":
        vae.encoder.compile()
    elif mode == "channels_last":
        _channels_last(vae)
    elif mode == "tiled":
        vae.enable_tiling()
    elif mode != "eager":
        raise ValueError(f"unknown VAE mode {mode!r}: choose one of {', '.join(VAE_MODES)}")
    return vae


def _channels_last(module: torch.nn.Module) -> None:
    """5-D weights (conv3d) to channels-last 3D, 4-D ones (the resamplers' conv2d) to channels-last.

    `Module.to(memory_format=...)` takes one format for every weight and fails on the mix."""
    formats = {5: torch.channels_last_3d, 4: torch.channels_last}
    for p in module.parameters():
        if p.dim() in formats:
            p.data = p.data.contiguous(memory_format=formats[p.dim()])
