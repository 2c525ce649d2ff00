"""What Cosmos 3's pipeline does, rebuilt for cached inputs: the transformer's packed sequence, the denoising loop
and leading-frame encoding.

Training and validation call the pipeline's own segment builders (`_prepare_text_segment`,
`_prepare_vision_segment`) through `pipeline_view`, so a training step sees exactly the sequence, rotary
positions and timestep convention of a sampling step. Both the family (models/cosmos3.py) and its action
dynamics (models/cosmos3_actions.py) build on this module, which imports neither.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch

NUM_TRAIN_TIMESTEPS = 1000  # the network's timestep = sigma * 1000 (cosmos-framework's num_train_timesteps)
PAD_ID = -1  # pads cached token-id rows to one length (no real token id is negative)
VAE_TEMPORAL = 4  # Wan2.2 VAE: frames per latent frame (after the first)


def pipeline_view(config) -> SimpleNamespace:
    """What the pipeline's segment builders read from `self`: the transformer config and the VAE's time stride."""
    return SimpleNamespace(transformer=SimpleNamespace(config=config), vae_scale_factor_temporal=VAE_TEMPORAL)


def transformer_inputs(config, input_ids: torch.Tensor, x_t: torch.Tensor, frame_sigma: torch.Tensor,
                       num_cond: int, fps: float | None) -> dict[str, Any]:
    """Keyword arguments of `Cosmos3OmniTransformer.forward` for one sample, built by the pipeline's own code.

    `input_ids` [L] text tokens; `x_t` [1, C, T, H, W] latents (clean on the first `num_cond` frames);
    `frame_sigma` [T] noise level per latent frame (read on the noisy frames only).
    """
    from diffusers import Cosmos3OmniPipeline

    view, dev = pipeline_view(config), x_t.device
    text = Cosmos3OmniPipeline._prepare_text_segment(view, input_ids.tolist(), dev)
    vision = Cosmos3OmniPipeline._prepare_vision_segment(
        view, x_t, has_image_condition=num_cond > 0, mrope_offset=text["vision_start_temporal_offset"],
        vision_fps=fps, curr=text["und_len"], device=dev, condition_frame_indexes=list(range(num_cond)))
    noisy = vision["vision_noisy_frame_indexes"][0]
    _, hp, wp = vision["vision_token_shapes"][0]
    timesteps = (frame_sigma.to(dev, torch.float32)[noisy] * NUM_TRAIN_TIMESTEPS).repeat_interleave(hp * wp)
    return dict(
        input_ids=text["input_ids"], text_indexes=text["text_indexes"], und_len=text["und_len"],
        position_ids=torch.cat([text["text_mrope_ids"], vision["vision_mrope_ids"]], dim=1),
        sequence_length=text["und_len"] + vision["num_vision_tokens"], vision_tokens=[x_t],
        vision_token_shapes=vision["vision_token_shapes"], vision_sequence_indexes=vision["vision_sequence_indexes"],
        vision_mse_loss_indexes=vision["vision_mse_loss_indexes"], vision_timesteps=timesteps,
        vision_noisy_frame_indexes=vision["vision_noisy_frame_indexes"], return_dict=False)


def action_condition(mode: str, chunk: int, domain, tier: int, view_point: str, **inputs):
    """The pipeline's `CosmosActionCondition` of an action run of `chunk` steps in `domain` (an ActionDomain)."""
    from diffusers import CosmosActionCondition

    return CosmosActionCondition(mode=mode, chunk_size=chunk, domain_name=domain.name, resolution_tier=tier,
                                 view_point=view_point, **inputs)


@contextmanager
def encode_leading_frames(pipe, pixel_frames: int):
    """Within the block, the pipeline VAE-encodes only the first `pixel_frames` frames of its conditioning
    video and leaves zeros for the rest.

    The pipeline encodes a full-length video (the conditioning frames repeated to the end, or a blank
    video for text2world) and then keeps only the conditioning latent frames: the others are multiplied by a zero
    mask before noise replaces them. The Wan VAE encodes causally in time (the first frame alone, then
    4-frame chunks with a feature cache), so the first k latent frames come from the first 4(k-1)+1
    frames alone, bit for bit; encoding only those is the same result without the rest of the work."""
    spatial, temporal = pipe.vae_scale_factor_spatial, pipe.vae_scale_factor_temporal

    def lean(x: torch.Tensor) -> torch.Tensor:
        b, _, t, h, w = x.shape
        out = x.new_zeros(b, pipe.vae.config.z_dim, (t - 1) // temporal + 1, h // spatial, w // spatial)
        if pixel_frames:
            head = type(pipe)._encode_video(pipe, x[:, :, :pixel_frames])
            out[:, :, :head.shape[2]] = head
        return out

    pipe._encode_video = lean
    try:
        yield
    finally:
        del pipe._encode_video


@torch.no_grad()
def sample_clean_first(transformer: torch.nn.Module, scheduler, x0: torch.Tensor, text: torch.Tensor,
                       noise: torch.Tensor, steps: int, guidance: float, inputs) -> torch.Tensor:
    """The pipeline's denoising loop on cached inputs, latent frame 0 of `x0` clean and the rest from `noise`, the
    network's timestep the scheduler's (sigma x 1000), guidance against the dropped text (row 1 of `text` [1, 2, L]).

    `inputs(config, ids, x, frame_sigma)` builds the transformer's keyword arguments: image-to-video and forward
    dynamics (which adds the clean action tokens) differ only there."""
    from worldtune.train.adapters import unwrap

    config, dtype = unwrap(transformer).config, next(transformer.parameters()).dtype
    prompt, dropped = (row[row != PAD_ID] for row in text[0])
    x = noise.float().clone()
    x[:, :, :1] = x0[:, :, :1].float()
    noisy = torch.ones(1, 1, x.shape[2], 1, 1, device=x.device)
    noisy[:, :, 0] = 0.0
    scheduler.set_timesteps(steps, device=x.device)
    for t in scheduler.timesteps:
        frame_sigma = torch.full((x.shape[2],), float(t) / NUM_TRAIN_TIMESTEPS, device=x.device)

        def velocity(ids: torch.Tensor) -> torch.Tensor:
            return transformer(**inputs(config, ids, x.to(dtype), frame_sigma))[0][0].float() * noisy

        v = velocity(prompt)
        if guidance > 1.0:
            v_drop = velocity(dropped)
            v = v_drop + guidance * (v - v_drop)
        x = scheduler.step(v, t, x, return_dict=False)[0]
    return x
