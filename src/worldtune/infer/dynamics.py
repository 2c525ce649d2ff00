"""Action-conditioned generation: forward dynamics (frame + actions -> video) and inverse dynamics (video ->
actions), through the model family's action interface (`ModelFamily.dynamics()`; Cosmos 3: its pipeline's
`__call__` with a `CosmosActionCondition`).

Both are the plain diffusers call, so a trained model behaves here exactly as in a user's own script; what
worldtune adds is the checking a policy-evaluation loop needs (one-line errors instead of a traceback deep
in the pipeline) and its seeding convention: the noise is drawn from a CPU `torch.Generator` seeded with
`seed`, as generation does, so a seed gives the same rollout on any device.

Shapes. An action chunk of K transitions pairs with a video of K + 1 frames (action k is taken at frame k
and leads to frame k + 1). The VAE compresses time 4x, so a chunk is a whole number of latent frames only
when K is a multiple of 4; any other K would come back with fewer frames than K + 1, so it is refused.
The pipeline fits the frames into the canvas of a resolution tier (`tier`: 256, 480, 704, 720; the bin of
the closest aspect ratio, downscaled never upscaled, padded on the right and bottom) and returns the content
region only: `forward_dynamics` gives frames of the content size rounded down to the VAE's 16 pixels, which
is the input size itself when that fits the canvas and is a multiple of 16.

A domain that is not one of the model's table (a new robot's slot) is registered first (`register_domain`);
actions are in the model's scaling (normalised as the domain was trained), at the domain's raw width.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from worldtune.errors import ConfigError
from worldtune.models.action_dynamics import ActionDomain
from worldtune.models.family import pipeline_dynamics

TIME_STRIDE = 4  # the Wan VAE's temporal compression


def forward_dynamics(pipe, first_frame: np.ndarray, actions: np.ndarray, domain: ActionDomain, task: str, *,
                     seed: int, steps: int, guidance: float, tier: int, view_point: str = "ego_view",
                     fps: float) -> np.ndarray:
    """The video [K+1, h, w, 3] uint8 that the action chunk `actions` [K, D] produces from `first_frame`
    [H, W, 3] uint8 (frame 0 is the model's reconstruction of it). K must be a multiple of 4."""
    frame = check_frames(first_frame[None] if isinstance(first_frame, np.ndarray) and first_frame.ndim == 3
                         else first_frame, "first_frame")
    chunk = check_actions(actions, domain)
    video = pipeline_dynamics(pipe).forward(pipe, frame[0], chunk, domain, task, seed=seed, steps=steps,
                                            guidance=guidance, tier=tier, view_point=view_point, fps=fps)
    if len(video) != len(chunk) + 1:  # the pipeline's own shapes changed: say so rather than return a short video
        raise ConfigError(f"the pipeline returned {len(video)} frames for a {len(chunk)}-action chunk, not "
                          f"{len(chunk) + 1}: check the diffusers version (worldtune is tested with 0.42.1)")
    return video


def inverse_dynamics(pipe, video: np.ndarray, domain: ActionDomain, task: str, *, seed: int, steps: int,
                     guidance: float, tier: int, view_point: str = "ego_view", fps: float) -> np.ndarray:
    """The action chunk [K, D] float32 (in the model's scaling) that leads through `video` [K+1, H, W, 3]
    uint8; every frame conditions, only the actions are denoised. K must be a multiple of 4."""
    frames = check_frames(video, "video")
    k = len(frames) - 1
    if k < TIME_STRIDE or k % TIME_STRIDE:
        raise ConfigError(f"video has {len(frames)} frames, so a chunk of {k} actions; inverse dynamics needs "
                          f"4k + 1 frames (a chunk of a multiple of {TIME_STRIDE} actions): give "
                          f"{max(TIME_STRIDE, k // TIME_STRIDE * TIME_STRIDE) + 1} frames")
    return pipeline_dynamics(pipe).inverse(pipe, frames, domain, task, seed=seed, steps=steps, guidance=guidance,
                                           tier=tier, view_point=view_point, fps=fps)


# ------------------------------------------------------------------------------ checks
def check_frames(frames: Any, what: str) -> np.ndarray:
    """Frames [T, H, W, 3] uint8 (T >= 1), or a one-line error naming `what` and the fix."""
    if not isinstance(frames, np.ndarray) or frames.ndim != 4 or frames.shape[-1] != 3 or not len(frames):
        shape = list(frames.shape) if isinstance(frames, np.ndarray) else type(frames).__name__
        raise ConfigError(f"{what}: got {shape}, expected RGB frames [T, H, W, 3] (one frame: [H, W, 3]) as a numpy "
                          "array")
    if frames.dtype != np.uint8:
        raise ConfigError(f"{what}: frames are {frames.dtype}, expected uint8 RGB (0..255): convert with "
                          "(x * 255).round().astype(np.uint8)")
    return frames


def check_actions(actions: Any, domain: ActionDomain) -> np.ndarray:
    """An action chunk [K, domain.width] float32 of finite numbers with K a positive multiple of 4, or a
    one-line error that says what is wrong and how to fix it."""
    try:
        a = np.asarray(actions, dtype=np.float32)
    except (TypeError, ValueError):
        raise ConfigError(f"actions are not numbers: give a [K, {domain.width}] array of floats") from None
    if a.ndim != 2 or a.shape[1] != domain.width:
        raise ConfigError(f"actions of shape {list(a.shape)}, but domain '{domain.name}' takes [K, {domain.width}]: "
                          f"give {domain.width} numbers per step")
    if not np.isfinite(a).all():
        step, entry = np.argwhere(~np.isfinite(a))[0].tolist()
        raise ConfigError(f"action step {step} entry {entry} is {a[step, entry]}: every action must be a finite number")
    k = len(a)
    if k < TIME_STRIDE or k % TIME_STRIDE:
        raise ConfigError(f"a chunk of {k} actions pairs with {k + 1} video frames, but the VAE makes 4k + 1 frames: "
                          f"give a multiple of {TIME_STRIDE} actions (e.g. {max(TIME_STRIDE, k // TIME_STRIDE * TIME_STRIDE)})")
    return a
