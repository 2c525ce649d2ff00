"""A Cosmos-Predict2.5 sampler that runs both guidance branches in one transformer call.

`Cosmos2_5_PredictBasePipeline.__call__` calls the transformer twice per step (prompt, then
negative prompt), each at batch 1. Stacking the two into one batch-2 call halves the kernel
launches and fills the GPU better; everything else here is the pipeline's algorithm, step for
step and dtype for dtype, so that for the same noise the result equals the pipeline's within
float tolerance (tests/infer/test_sampler.py checks it on the tiny model):

    x_in  = m * x_cond + (1 - m) * x                 m: condition mask (clean leading latent frames)
    t_in  = m * t_cond + (1 - m) * sigma_i
    v     = v_gt + (1 - m) * DiT(x_in, t_in, text)   v_gt = (x - x_cond) * m keeps cond frames fixed
    v     = v_pos + w * (v_pos - v_neg)              classifier-free guidance, w = guidance
    x     = UniPC.step(v, t_i, x)

The pipeline's own helpers are reused where they are plain data preparation (conditioning video
preprocessing and VAE encoding in `prepare_latents`, the scheduler), so both paths see identical
inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Conditioning:
    """What the denoiser sees besides the noise: clean latents, their mask, and their timestep."""

    latents: torch.Tensor  # initial noise, float32 [1,C,T,h,w]
    cond_latents: torch.Tensor
    cond_mask: torch.Tensor  # [1,1,T,h,w], transformer dtype
    cond_indicator: torch.Tensor  # [1,1,T,1,1]


def condition_video(pipe, frames: np.ndarray | None, height: int, width: int, cond_latent_frames: int,
                    as_image: bool) -> torch.Tensor | None:
    """The real conditioning frames, preprocessed as the pipeline does ([1, 3, n, H, W] in [-1, 1]).

    Image: the one image (n = 1). Video: its last 4(k-1)+1 frames (the pipeline's choice). Text: None.
    """
    if frames is None:
        return None
    if as_image:  # as a [0, 1] tensor, like the pipeline (PIL and tensor resizing differ)
        import torchvision.transforms.functional as TF

        return pipe.video_processor.preprocess_video(TF.to_tensor(frames[0])[None, None], height, width)
    from PIL import Image

    n_in = 4 * (cond_latent_frames - 1) + 1
    video = pipe.video_processor.preprocess_video([Image.fromarray(f) for f in frames], height, width)
    return video[:, :, -n_in:]


@torch.no_grad()
def prepare(pipe, frames: np.ndarray | None, noise: torch.Tensor, num_frames: int, height: int, width: int,
            cond_latent_frames: int = 1, as_image: bool = True) -> Conditioning:
    """Encode the conditioning frames and build mask and indicator (the pipeline's own prepare_latents).

    The pipeline VAE-encodes a whole `num_frames` video (the conditioning frames padded with black
    or with the last frame) and then masks out every latent frame but the first k. The Wan VAE is
    causal in time, so latent frame j depends only on pixel frames <= 4j: encoding just the 4(k-1)+1
    real frames gives the same k latent frames for a fraction of the time and memory (93 frames at
    432x768: ~1.1 s and most of the pipeline's peak memory). The masked latent frames are zeros.
    """
    device = pipe._execution_device
    video = condition_video(pipe, frames, height, width, cond_latent_frames, as_image)
    n_in = 0 if video is None else video.shape[2]
    if video is not None:
        video = video.to(device=device, dtype=pipe.vae.dtype)
    latents, cond_latents, cond_mask, cond_indicator = pipe.prepare_latents(
        video=video, batch_size=1, num_channels_latents=pipe.transformer.config.in_channels - 1,
        height=height, width=width, num_frames_in=n_in, num_frames_out=num_frames,
        do_classifier_free_guidance=True, dtype=torch.float32, device=device, generator=None,
        latents=noise.to(device=device, dtype=torch.float32))
    pad = latents.shape[2] - cond_latents.shape[2]
    if pad > 0:
        cond_latents = torch.cat([cond_latents, cond_latents.new_zeros(*cond_latents.shape[:2], pad,
                                                                       *cond_latents.shape[3:])], dim=2)
    return Conditioning(latents, cond_latents, cond_mask.to(pipe.transformer.dtype), cond_indicator)


@torch.no_grad()
def denoise(pipe, cond: Conditioning, prompt_embeds: torch.Tensor, negative_prompt_embeds: torch.Tensor | None,
            steps: int, guidance: float, cond_timestep: float = 1e-4, batch_guidance: bool = True,
            on_step=None) -> torch.Tensor:
    """Run the sampling loop; returns the final (normalised) latents, float32.

    With a step cache on the transformer (models/step_cache.py), each guidance branch's calls are one cache state
    (the batch-2 call is one), and the cache starts empty for every video."""
    from worldtune.models.step_cache import reset_step_cache, step_context

    transformer, scheduler = pipe.transformer, pipe.scheduler
    reset_step_cache(transformer)
    device, dtype = cond.latents.device, transformer.dtype
    use_cfg = guidance > 1.0
    height, width = (s * pipe.vae_scale_factor_spatial for s in cond.latents.shape[-2:])
    padding_mask = cond.latents.new_zeros(1, 1, height, width, dtype=dtype)
    scheduler.set_timesteps(steps, device=device)
    latents, m = cond.latents, cond.cond_mask
    v_gt = (latents - cond.cond_latents) * m
    text = prompt_embeds.to(device)
    if use_cfg and batch_guidance:
        text = torch.cat([text, negative_prompt_embeds.to(device)], dim=0)
    for i, t in enumerate(scheduler.timesteps):
        sigma = scheduler.sigmas[i].expand(1).to(device=device, dtype=torch.float32)
        t_in = cond.cond_indicator * cond_timestep + (1 - cond.cond_indicator) * sigma.view(1, 1, 1, 1, 1)
        x_in = (m * cond.cond_latents + (1 - m) * latents).to(dtype)

        def dit(x, mask, tt, emb, branch):
            with step_context(transformer, branch, i, steps):
                return transformer(hidden_states=x, condition_mask=mask, timestep=tt, encoder_hidden_states=emb,
                                   padding_mask=padding_mask, return_dict=False)[0]

        if use_cfg and batch_guidance:
            out = dit(x_in.expand(2, -1, -1, -1, -1), m.expand(2, -1, -1, -1, -1), t_in.expand(2, -1, -1, -1, -1), text,
                      "guided")
            v_pos, v_neg = (v_gt + o * (1 - m) for o in out.chunk(2))
        else:
            v_pos = v_gt + dit(x_in, m, t_in, text, "cond") * (1 - m)
            v_neg = v_gt + dit(x_in, m, t_in, negative_prompt_embeds.to(device), "uncond") * (1 - m) if use_cfg else None
        v = v_pos + guidance * (v_pos - v_neg) if use_cfg else v_pos
        latents = scheduler.step(v, t, latents, return_dict=False)[0]
        if on_step is not None:
            on_step(i)
    reset_step_cache(transformer)  # the cached tensors are freed with the video
    return latents


@torch.no_grad()
def decode(pipe, latents: torch.Tensor, num_frames: int) -> np.ndarray:
    """Normalised latents -> video [T,H,W,3] float in [0,1] (what the pipeline returns for output_type="np")."""
    mean = pipe.latents_mean.to(latents.device, latents.dtype)
    std = pipe.latents_std.to(latents.device, latents.dtype)  # the pipeline stores 1/std
    video = pipe.vae.decode((latents / std + mean).to(pipe.vae.dtype), return_dict=False)[0]
    if video.shape[2] != num_frames:  # the Wan VAE returns 4(T-1)+1 frames; only odd requests differ
        video = video[:, :, :num_frames]
    return pipe.video_processor.postprocess_video(video, output_type="np")[0]
