"""Baselines of a generation folder: what doing nothing scores, and the most any model can score through its VAE.

A score alone says little: 24 dB of PSNR is good when holding the first frame reads 18 dB and the real clip
through the model's own autoencoder reads 26, and poor when holding the first frame reads 25. So
`worldtune generate` writes two baselines beside the models' videos (`generate.baselines`), as rows of
generations.jsonl like any model's; evaluation, its paired differences, the report and every stage that reads
the folder take them as they take a model:

- `first_frame`: the conditioning frame(s) the model is given, the last one held to the end (image2world: the
  first frame repeated). A model without dynamics scores this; a model worth running beats it where the scene
  moves (dynamic PSNR, the motion IoUs).
- `vae_round_trip`: the real continuation (a prepared dataset's clip) through the model's VAE,
  decode(encode(real)), with the latent distribution's mode (as the conditioning frames are encoded), at the
  run's size and frame count. Every generated video is decoded by that VAE, so no model gets closer to the real
  clip than this on any pixel metric.

Neither depends on the seed, but evaluation pairs videos by (input, seed): each baseline therefore has a row for
every seed of its input, all naming one file per input (`<out>/<baseline>/<name>.mp4`, plus its camera views),
computed once. An input without what a baseline needs (text2world gives no frame to hold; folder and JSONL inputs
have no real clip) gets no row of it, and generate counts these with one line saying why.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from worldtune.infer.inputs import GenerationInput, load_condition, load_view_conditions

#: Baseline name (its model label in generations.jsonl) -> what it is, in the words a report shows.
BASELINES: dict[str, str] = {
    "first_frame": "first frame repeated (no dynamics)",
    "vae_round_trip": "real clip through the VAE (upper bound)",
}


def missing(kind: str, item: GenerationInput, mode: str) -> str | None:
    """Why `item` gets no `kind` baseline (one line), or None when it gets one."""
    if kind == "first_frame":
        if mode == "text2world":
            return "text2world gives the model no frame to hold"
        return None if item.image is not None or item.video is not None or item.views else "no image or video"
    return None if item.ground_truth is not None or item.views else \
        "no real clip (folder and JSONL inputs have none; generate from a prepared dataset)"


def hold(cond: np.ndarray, num_frames: int) -> np.ndarray:
    """The conditioning frames [k, H, W, 3], the last one repeated until there are `num_frames`."""
    k = min(len(cond), num_frames)
    return np.concatenate([cond[:k], np.repeat(cond[k - 1:k], num_frames - k, axis=0)])


@torch.no_grad()
def vae_round_trip(vae, frames: np.ndarray) -> np.ndarray:
    """decode(encode(frames)) through `vae`: uint8 [F, H, W, 3] (F = 4k+1) in, uint8 out, with the same helpers
    (worldtune.models.latents) that cache and train encode with."""
    from worldtune.models.latents import decode, encode, frames_to_pixels, pixels_to_frames

    return pixels_to_frames(decode(vae, encode(vae, frames_to_pixels(frames).unsqueeze(0)))[0])


def real_clip(path, s: Any, temporal: int) -> np.ndarray:
    """The real clip at the run's size (fitted by `generate.resize`, as the conditioning is), its first
    `num_frames` frames; a shorter clip gives its longest prefix the VAE takes (a multiple of `temporal`, plus 1)."""
    from worldtune.data.layout import resize_frames
    from worldtune.data.video import read_frames

    frames = read_frames(path)
    n = (min(len(frames), s.num_frames) - 1) // temporal * temporal + 1
    return resize_frames(frames[:n], s.height, s.width, s.resize)


def make(kind: str, item: GenerationInput, s: Any, vae, roles: list[str] | None) -> np.ndarray | dict[str, np.ndarray]:
    """One input's baseline video: packed frames [T, H, W, 3], or {role: frames} for separate camera views
    (`roles` set), each view on its own as the multi-view model generates them. `s` is the run's Settings."""
    if kind == "first_frame":
        if roles:
            return {r: hold(f, s.num_frames) for r, f in load_view_conditions(item, s.height, s.width, s.resize).items()}
        cond = load_condition(item, s.mode, s.cond_pixel_frames, s.height, s.width, s.resize)
        return hold(cond, s.num_frames)
    if kind == "vae_round_trip":
        temporal = int(vae.config.scale_factor_temporal)
        if roles:
            return {r: vae_round_trip(vae, real_clip(f, s, temporal)) for r, f in item.view_files.items()}
        return vae_round_trip(vae, real_clip(item.ground_truth, s, temporal))
    raise ValueError(f"unknown baseline {kind!r}: choose from {', '.join(BASELINES)}")
