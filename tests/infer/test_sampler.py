"""worldtune's batched-guidance sampler equals the diffusers pipeline, for every conditioning mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from tests.infer.conftest import F, H, W, random_frames
from worldtune.models import predict_sampler as sampler
from worldtune.infer.generate import initial_noise

STEPS = 3
SEQ = 160  # the tiny spec's 64 tokens do not get past the chat template's system prompt


def _embed(pipe, text: str) -> torch.Tensor:
    return pipe.encode_prompt(text, do_classifier_free_guidance=False, max_sequence_length=SEQ)[0]


@pytest.mark.parametrize("mode,cond_frames,frames_in,batch", [
    ("image2world", 1, 1, True), ("image2world", 1, 1, False), ("video2world", 2, 5, True), ("text2world", 1, 0, True)])
def test_sampler_equals_pipeline(tiny_pipe, mode, cond_frames, frames_in, batch):
    frames = random_frames(frames_in) if frames_in else None
    num_frames = 9 if cond_frames == 2 else F
    kw = dict(prompt="a robot arm picks a cube", negative_prompt="blurry", height=H, width=W, num_frames=num_frames,
              num_inference_steps=STEPS, guidance_scale=7.0, generator=torch.Generator().manual_seed(11),
              output_type="np", max_sequence_length=SEQ)
    if mode == "image2world":
        kw["image"] = Image.fromarray(frames[0])
    elif mode == "video2world":
        kw["video"] = [Image.fromarray(f) for f in frames]
        kw["num_latent_conditional_frames"] = cond_frames
    want = tiny_pipe(**kw).frames[0]

    t = (num_frames - 1) // 4 + 1
    noise = initial_noise(11, (1, 16, t, H // 8, W // 8))
    cond = sampler.prepare(tiny_pipe, frames, noise, num_frames, H, W, cond_frames, as_image=mode == "image2world")
    latents = sampler.denoise(tiny_pipe, cond, _embed(tiny_pipe, "a robot arm picks a cube"),
                              _embed(tiny_pipe, "blurry"), STEPS, 7.0, batch_guidance=batch)
    got = sampler.decode(tiny_pipe, latents, num_frames)
    assert got.shape == want.shape == (num_frames, H, W, 3)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_guidance_changes_output(tiny_pipe):
    """Sanity: the comparison above is not vacuous (guidance and seed move the result)."""
    frames = random_frames(1)
    pos, neg = _embed(tiny_pipe, "a robot arm picks a cube"), _embed(tiny_pipe, "blurry")
    outs = []
    for seed, g in ((1, 7.0), (1, 1.0), (2, 7.0)):
        cond = sampler.prepare(tiny_pipe, frames, initial_noise(seed, (1, 16, 2, H // 8, W // 8)), F, H, W)
        outs.append(sampler.decode(tiny_pipe, sampler.denoise(tiny_pipe, cond, pos, neg, STEPS, g), F))
    assert np.abs(outs[0] - outs[1]).max() > 1e-3
    assert np.abs(outs[0] - outs[2]).max() > 1e-3
