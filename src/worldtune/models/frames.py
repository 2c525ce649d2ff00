"""Cosmos 3 latents straight to uint8 video frames, on the device, one latent frame at a time.

`Cosmos3OmniPipeline.__call__(output_type="np")` decodes the whole video, copies it to the host as
float32 and leaves the uint8 conversion to the caller: at 93x480x832 that is 445 MB through the
host copy and four NumPy passes over it, about 1.1 s on an H200 machine beside a 2 s decode
(benchmarks/cosmos3_profile.py). The same arithmetic runs here on the device: un-normalise as the
pipeline does, run the Wan decoder over each latent frame with its causal feature cache (what
`AutoencoderKLWan._decode` loops over), and turn each decoded chunk into uint8 as soon as it exists
(`(x * 0.5 + 0.5).clamp(0, 1)`, the pipeline's denormalise, then `to_uint8`'s `* 255`, round, cast).
Only uint8 crosses to the host, into pinned memory on CUDA, while the next chunk decodes.

Every operation is the pipeline's, in its order and dtypes, applied per chunk: the frames equal
`to_uint8(pipeline video)` bit for bit (tests/infer/test_cosmos3_generate.py).
"""

from __future__ import annotations

import numpy as np
import torch


def decode_view(vae: torch.nn.Module) -> torch.nn.Module:
    """The VAE as a second object sharing every weight but not the feature caches the Wan VAE keeps on itself
    (`clear_cache` resets the encoder's and the decoder's together), so one thread can decode with it while
    another encodes with the original."""
    import copy

    return copy.copy(vae)


def unnormalize(pipe, latents: torch.Tensor) -> torch.Tensor:
    """Normalised Cosmos 3 latents ([C, T, H, W] or [1, C, T, H, W]) -> raw VAE latents, as the pipeline does it
    (statistics in the VAE's dtype, divide by the inverse std)."""
    dtype = pipe.vae.dtype
    mean = pipe._vae_latents_mean.to(device=latents.device, dtype=dtype)
    inv_std = pipe._vae_latents_inv_std.to(device=latents.device, dtype=dtype)
    return latents.to(dtype) / inv_std.view(1, -1, 1, 1, 1) + mean.view(1, -1, 1, 1, 1)


def pixels_to_uint8(pixels: torch.Tensor) -> torch.Tensor:
    """Decoded float32 pixels [3, F, H, W] in [-1, 1] -> uint8 [F, H, W, 3], on their device: the pipeline's
    denormalise followed by `to_uint8`'s arithmetic, in float32."""
    x = (pixels * 0.5 + 0.5).clamp(0, 1)
    return (x * 255.0).round().to(torch.uint8).permute(1, 2, 3, 0)


def _streamable(vae) -> bool:
    """The Wan VAE's frame loop applies (not tiled; the loop's internals are there)."""
    return (not getattr(vae, "use_tiling", False) and hasattr(vae, "clear_cache") and hasattr(vae, "decoder")
            and hasattr(vae, "post_quant_conv"))


@torch.no_grad()
def decode_to_frames(pipe, latents: torch.Tensor, vae: torch.nn.Module | None = None) -> np.ndarray:
    """One video's latents -> uint8 frames [F, H, W, 3] on the host, equal to the pipeline's float output
    passed through `to_uint8`; `vae` (a `decode_view` of the pipeline's) decodes where given."""
    from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

    vae, out_dtype = vae if vae is not None else pipe.vae, latents.dtype
    z = unnormalize(pipe, latents)
    if not _streamable(vae):
        pixels = vae.decode(z).sample.to(out_dtype)
        return pixels_to_uint8(pixels[0]).cpu().numpy()
    latent_frames = z.shape[2]
    cuda = z.device.type == "cuda"
    # the Wan decoder turns the first latent frame into one frame and every later one into `scale_factor_temporal`
    total = 1 + (latent_frames - 1) * int(vae.config.scale_factor_temporal)
    chunks: list[torch.Tensor] = []
    host: torch.Tensor | None = None
    done = 0
    vae.clear_cache()
    try:
        x = vae.post_quant_conv(z)
        for i in range(latent_frames):
            vae._conv_idx = [0]
            out = vae.decoder(x[:, :, i:i + 1], feat_cache=vae._feat_map, feat_idx=vae._conv_idx, first_chunk=i == 0)
            if vae.config.patch_size is not None:
                out = unpatchify(out, patch_size=vae.config.patch_size)
            frames = pixels_to_uint8(torch.clamp(out, min=-1.0, max=1.0).to(out_dtype)[0])
            if not cuda or chunks or done + frames.shape[0] > total:  # off CUDA, or a decoder of another stride
                chunks.append(frames if host is None or chunks else torch.cat([host[:done].to(z.device), frames]))
                continue
            if host is None:
                host = torch.empty((total, *frames.shape[1:]), dtype=torch.uint8, pin_memory=True)
            host[done:done + frames.shape[0]].copy_(frames, non_blocking=True)  # lands while the next chunk decodes
            done += frames.shape[0]
    finally:
        vae.clear_cache()
    if chunks:
        if cuda:
            torch.cuda.current_stream(z.device).synchronize()
        return torch.cat(chunks).cpu().numpy()
    torch.cuda.current_stream(z.device).synchronize()  # the non-blocking copies have landed
    return host[:done].numpy()
