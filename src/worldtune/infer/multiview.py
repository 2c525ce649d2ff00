"""Generate V camera views at once with the multi-view model, from V first frames and a prompt.

The algorithm is `Cosmos2_5_PredictBasePipeline.__call__`'s (image-to-world) with the views
stacked along time: each view's first frame is encoded by the VAE on its own (the pipeline's
`prepare_latents`, via `worldtune.infer.sampler.prepare`), the V conditionings are concatenated,
and one DiT call per step denoises all views together:

    x_in = m·x_cond + (1 − m)·x,   t_in = m·t_cond + (1 − m)·σ_i       m: first latent frame of EVERY view
    v    = (x − x_cond)·m + (1 − m)·DiT(x_in, t_in, text)
    v    = v_pos + w·(v_pos − v_neg)                                   classifier-free guidance
    x    = UniPC.step(v, t_i, x)                                        the pipeline's scheduler (flow sigmas)

Each view is decoded by the VAE on its own and written as `<out>/<role>.mp4`. The initial noise
is drawn on the CPU from `seed`, so a seed gives the same noise on any device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from worldtune.errors import GenerationError


@dataclass
class MultiViewVideos:
    """The generated views: frames uint8 [T, H, W, 3] per role, and where they were written."""

    frames: dict[str, np.ndarray]
    paths: dict[str, Path] = field(default_factory=dict)
    seconds: float = 0.0


def _roles(mv_model, first_frames: dict[str, np.ndarray]) -> list[str]:
    roles = mv_model.roles or list(first_frames)
    if sorted(roles) != sorted(first_frames):
        raise GenerationError(f"the model's views are {roles} but first frames were given for {sorted(first_frames)}: "
                              f"give one first frame per view")
    if len(roles) != mv_model.num_views:
        raise GenerationError(f"{len(roles)} first frames for a {mv_model.num_views}-view model")
    return roles


def _embed(pipe, prompt: str, device, max_sequence_length: int) -> torch.Tensor:
    emb, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False, device=torch.device(device),
                                max_sequence_length=max_sequence_length)
    return emb


@torch.no_grad()
def generate_multiview(pipe, mv_model, first_frames: dict[str, np.ndarray], prompt: str, seed: int = 0,
                       steps: int = 36, guidance: float = 7.0, num_frames: int = 93, *,
                       out: str | Path | None = None, height: int | None = None, width: int | None = None,
                       negative_prompt: str = "", fps: float = 16.0, cond_timestep: float = 1e-4,
                       max_sequence_length: int = 512) -> MultiViewVideos:
    """V videos from V first frames (HxWx3 uint8 each, keyed by role) and one prompt.

    `pipe` supplies the VAE, text encoder and scheduler; `mv_model` (a MultiViewTransformer around
    `pipe.transformer` or a tuned copy) the denoiser. Height/width default to the first frame's
    size. With `out`, writes `<out>/<role>.mp4` at `fps`.
    """
    import time

    from worldtune.infer.sampler import decode, prepare

    t0 = time.perf_counter()
    roles = _roles(mv_model, first_frames)
    h0, w0 = first_frames[roles[0]].shape[:2]
    height, width = height or h0, width or w0
    if height % 16 or width % 16:
        raise GenerationError(f"view size {height}x{width} must be divisible by 16 (8x VAE, 2x2 patches)")
    if (num_frames - 1) % 4:
        raise GenerationError(f"num_frames={num_frames} must be 4k+1 (the VAE compresses time 4x)")
    device = pipe._execution_device
    t_lat = (num_frames - 1) // pipe.vae_scale_factor_temporal + 1
    c = pipe.transformer.config.in_channels - 1
    hl, wl = height // pipe.vae_scale_factor_spatial, width // pipe.vae_scale_factor_spatial
    noise = torch.randn((1, c, len(roles) * t_lat, hl, wl), generator=torch.Generator().manual_seed(seed))
    conds = [prepare(pipe, first_frames[r][None], noise[:, :, i * t_lat:(i + 1) * t_lat], num_frames, height, width,
                     cond_latent_frames=1, as_image=True) for i, r in enumerate(roles)]
    latents = torch.cat([k.latents for k in conds], dim=2)
    x_cond = torch.cat([k.cond_latents for k in conds], dim=2)
    m = torch.cat([k.cond_mask for k in conds], dim=2)
    indicator = torch.cat([k.cond_indicator for k in conds], dim=2)

    pos = _embed(pipe, prompt, device, max_sequence_length)
    use_cfg = guidance > 1.0
    text = torch.cat([pos, _embed(pipe, negative_prompt, device, max_sequence_length)]) if use_cfg else pos
    dtype = mv_model.dtype
    padding_mask = latents.new_zeros(1, 1, height, width, dtype=dtype)
    sched = pipe.scheduler
    sched.set_timesteps(steps, device=device)
    v_gt = (latents - x_cond) * m
    n = text.shape[0]
    for i, t in enumerate(sched.timesteps):
        sigma = sched.sigmas[i].to(device=device, dtype=torch.float32)
        t_in = indicator * cond_timestep + (1 - indicator) * sigma
        x_in = (m * x_cond + (1 - m) * latents).to(dtype)
        out_ = mv_model(hidden_states=x_in.expand(n, -1, -1, -1, -1), timestep=t_in.expand(n, -1, -1, -1, -1).to(dtype),
                        encoder_hidden_states=text.to(dtype), condition_mask=m.expand(n, -1, -1, -1, -1),
                        padding_mask=padding_mask, return_dict=False)[0].float()
        vel = [v_gt + o * (1 - m) for o in out_.chunk(n)]
        v = vel[0] + guidance * (vel[0] - vel[1]) if use_cfg else vel[0]
        latents = sched.step(v, t, latents, return_dict=False)[0]

    frames = {}
    for i, r in enumerate(roles):
        video = decode(pipe, latents[:, :, i * t_lat:(i + 1) * t_lat], num_frames)
        frames[r] = (np.clip(video, 0, 1) * 255).round().astype(np.uint8)
    result = MultiViewVideos(frames)
    if out is not None:
        from worldtune.data.video import write_video

        for r, fr in frames.items():
            result.paths[r] = write_video(Path(out) / f"{r}.mp4", fr, fps=fps)
    result.seconds = time.perf_counter() - t0
    return result


def crossview_sampson(videos: dict[str, np.ndarray], moving: tuple[str, ...] = ("wrist",)) -> dict[str, dict]:
    """Cross-view Sampson error of every pair of generated views (pooled F unless a view moves).

    Returns {"a|b": SeriesScore.summary()}: mean/median px, pairs evaluated, skips per reason.
    """
    from itertools import combinations

    from worldtune.eval.sampson import SampsonConfig, SampsonError

    metric = SampsonError(SampsonConfig(moving_views=moving))
    out = {}
    for a, b in combinations(sorted(videos), 2):
        pooled = not (metric.is_moving(a) or metric.is_moving(b))
        out[f"{a}|{b}"] = metric.crossview(videos[a], videos[b], pooled=pooled, name=f"{a}|{b}").summary()
    return out
