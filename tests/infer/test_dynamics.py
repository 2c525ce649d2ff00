"""Cosmos 3 forward and inverse dynamics (`infer/dynamics.py`) on `tiny-cosmos3`: the same result as the plain
`Cosmos3OmniPipeline(...)(action=CosmosActionCondition(...))` call with the same inputs and noise; a new domain
goes through its own projection slot; bad input is a one-line ConfigError before any model work."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from tests.infer.conftest import random_frames
from worldtune.errors import ConfigError
from worldtune.infer.dynamics import forward_dynamics, inverse_dynamics
from worldtune.models.cosmos3_domains import ActionDomain
from worldtune.models.latents import to_uint8

H, W, K, FPS, TIER, STEPS = 64, 112, 8, 15.0, 256, 2  # 9 frames: 3 latent frames of 4 x 7
TASK = "Put the red cube on the blue one."
DROID = ActionDomain("droid_lerobot", 8, 10, new=False)


@pytest.fixture(scope="module")
def pipe(tiny_cosmos3_dir):
    from worldtune.models.load import load_pipeline

    pipe, _ = load_pipeline(str(tiny_cosmos3_dir), dtype="fp32")  # what `worldtune serve` loads on the CPU
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def plain(tiny_cosmos3_dir):
    """The pipeline as plain diffusers loads it, no worldtune code."""
    from diffusers import Cosmos3OmniPipeline

    pipe = Cosmos3OmniPipeline.from_pretrained(tiny_cosmos3_dir)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _actions(k: int = K, width: int = 10, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (k, width)).astype(np.float32)


def _plain_call(plain, seed: int, guidance: float, output_type: str, **condition):
    from diffusers import CosmosActionCondition

    return plain(TASK, action=CosmosActionCondition(chunk_size=K, domain_name="droid_lerobot", resolution_tier=TIER,
                                                    **condition),
                 fps=FPS, num_inference_steps=STEPS, guidance_scale=guidance, output_type=output_type,
                 generator=torch.Generator("cpu").manual_seed(seed))


@pytest.mark.usefixtures("reference_conv3d")
def test_forward_dynamics_equals_the_plain_pipeline_call(pipe, plain, one_thread):
    """Same first frame, actions, task, tier, fps, steps, guidance and seed: the same frames, bit for bit.
    worldtune VAE-encodes only the first frame where the pipeline encodes all K + 1 (the Wan VAE is causal in
    time, so the kept latent frame is the same)."""
    frame, actions = random_frames(1, H, W, seed=3)[0], _actions()
    ours = forward_dynamics(pipe, frame, actions, DROID, TASK, seed=5, steps=STEPS, guidance=3.0, tier=TIER, fps=FPS)
    ref = _plain_call(plain, 5, 3.0, "np", mode="forward_dynamics", raw_actions=torch.from_numpy(actions),
                      image=Image.fromarray(frame))
    assert ours.shape == (K + 1, H, W, 3) and ours.dtype == np.uint8
    np.testing.assert_array_equal(ours, to_uint8(np.asarray(ref.video)))
    other = forward_dynamics(pipe, frame, actions, DROID, TASK, seed=6, steps=STEPS, guidance=3.0, tier=TIER, fps=FPS)
    assert not np.array_equal(ours, other)  # the seed is the noise


@pytest.mark.usefixtures("reference_conv3d")
def test_inverse_dynamics_equals_the_plain_pipeline_call(pipe, plain, one_thread):
    video = random_frames(K + 1, H, W, seed=4)
    ours = inverse_dynamics(pipe, video, DROID, TASK, seed=2, steps=STEPS, guidance=2.0, tier=TIER, fps=FPS)
    ref = _plain_call(plain, 2, 2.0, "latent", mode="inverse_dynamics", video=[Image.fromarray(f) for f in video])
    assert ours.shape == (K, 10) and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, ref.action[0].numpy())
    assert not np.array_equal(ours, inverse_dynamics(pipe, video, DROID, TASK, seed=3, steps=STEPS, guidance=2.0,
                                                     tier=TIER, fps=FPS))


def test_a_new_domain_is_registered_and_uses_its_own_slot(pipe, one_thread):
    """A robot without a released domain (7-D, slot 31): diffusers learns its name and width, and the
    transformer reads slot 31's projection rows."""
    from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as p

    robot = ActionDomain("test_robot_7d", 31, 7, new=True)
    seen = []
    hook = pipe.transformer.register_forward_hook(
        lambda m, a, kw, out: seen.append(int(kw["action_domain_ids"][0])), with_kwargs=True)
    try:
        video = forward_dynamics(pipe, random_frames(1, H, W)[0], _actions(4, 7), robot, TASK, seed=0, steps=1,
                                 guidance=1.0, tier=TIER, fps=FPS)
    finally:
        hook.remove()
        p._EMBODIMENT_TO_DOMAIN_ID.pop(robot.name, None)
        p._EMBODIMENT_TO_RAW_ACTION_DIM.pop(robot.name, None)
    assert video.shape == (5, H, W, 3) and seen == [31]


def _nan_actions() -> np.ndarray:
    a = _actions()
    a[2, 3] = np.nan
    return a


def _inf_actions() -> np.ndarray:
    a = _actions()
    a[0, 0] = np.inf
    return a


@pytest.mark.parametrize("actions, words", [
    (_actions(width=7), "takes \\[K, 10\\]"),
    (_actions()[:, :, None], "takes \\[K, 10\\]"),
    (_nan_actions(), "step 2 entry 3 is nan"),
    (_inf_actions(), "step 0 entry 0 is inf"),
    (_actions(k=6), "multiple of 4"),
    ([["a"] * 10] * 8, "not numbers"),
])
def test_bad_actions_are_one_line_errors(pipe, actions, words):
    with pytest.raises(ConfigError, match=words) as e:
        forward_dynamics(pipe, random_frames(1, H, W)[0], actions, DROID, TASK, seed=0, steps=1, guidance=1.0,
                         tier=TIER, fps=FPS)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("video, words", [
    (random_frames(K, H, W), "4k \\+ 1 frames"),  # 8 frames: a chunk of 7
    (random_frames(K + 1, H, W).astype(np.float32), "uint8"),
    (random_frames(K + 1, H, W)[..., :2], "\\[T, H, W, 3\\]"),
])
def test_bad_videos_are_one_line_errors(pipe, video, words):
    with pytest.raises(ConfigError, match=words) as e:
        inverse_dynamics(pipe, video, DROID, TASK, seed=0, steps=1, guidance=1.0, tier=TIER, fps=FPS)
    assert "\n" not in str(e.value)


def test_bad_settings_are_one_line_errors(pipe):
    frame, actions = random_frames(1, H, W)[0], _actions()
    kw = dict(seed=0, steps=1, guidance=1.0, fps=FPS)
    with pytest.raises(ConfigError, match="tier 300"):
        forward_dynamics(pipe, frame, actions, DROID, TASK, tier=300, **kw)
    with pytest.raises(ConfigError, match="not Cosmos 3's 'droid_lerobot'"):
        forward_dynamics(pipe, frame, actions, ActionDomain("droid_lerobot", 9, 10, False), TASK, tier=TIER, **kw)
