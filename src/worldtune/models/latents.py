"""Pixels <-> normalised Cosmos latents, exactly as the diffusers pipelines do it.

Both families encode with the Wan2.1 VAE and normalise with the VAE config's per-channel
`latents_mean` / `latents_std`: x0 = (mode(VAE(x)) − mean) / std (Predict2 also multiplies by its
scheduler's sigma_data, which is 1). Training, caching and validation must all use this one
function, or the cached latents would not match what the sampler decodes.
"""

from __future__ import annotations

import numpy as np
import torch


def _stats(vae, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    z = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean, device=like.device, dtype=torch.float32).view(1, z, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std, device=like.device, dtype=torch.float32).view(1, z, 1, 1, 1)
    return mean, std


def frames_to_pixels(frames: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 [T, H, W, 3] -> float [3, T, H, W] in [-1, 1] (the VAE's input range)."""
    x = torch.as_tensor(np.ascontiguousarray(frames) if isinstance(frames, np.ndarray) else frames)
    return x.permute(3, 0, 1, 2).float().div(127.5).sub(1.0)


@torch.no_grad()
def encode(vae, pixels: torch.Tensor) -> torch.Tensor:
    """[B, 3, F, H, W] in [-1, 1] -> normalised latents [B, 16, (F−1)/4+1, H/8, W/8] in float32."""
    p = next(vae.parameters())
    dist = vae.encode(pixels.to(device=p.device, dtype=p.dtype)).latent_dist
    lat = dist.mode().float()
    mean, std = _stats(vae, lat)
    return (lat - mean) / std


@torch.no_grad()
def decode(vae, latents: torch.Tensor) -> torch.Tensor:
    """Normalised latents -> pixels [B, 3, F, H, W] in [-1, 1]."""
    mean, std = _stats(vae, latents)
    p = next(vae.parameters())
    raw = (latents.float() * std + mean).to(device=p.device, dtype=p.dtype)
    return vae.decode(raw, return_dict=False)[0].float().clamp(-1, 1)


def pixels_to_frames(pixels: torch.Tensor) -> np.ndarray:
    """[3, F, H, W] in [-1, 1] -> uint8 [F, H, W, 3]."""
    x = ((pixels.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.permute(1, 2, 3, 0).cpu().numpy()


def initial_noise(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Unit Gaussian noise from a CPU generator: identical on every device and for every model variant."""
    return torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed), dtype=torch.float32)


def to_uint8(video: np.ndarray) -> np.ndarray:
    """A float video in [0, 1] (what pipelines return) as uint8 frames; uint8 frames (what a family that decodes
    on the device returns) pass through."""
    if video.dtype == np.uint8:
        return video
    return (np.clip(video, 0.0, 1.0) * 255.0).round().astype(np.uint8)
