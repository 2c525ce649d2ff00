"""The success detector: from two exterior views to the task's verdict, checked against the simulator."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from worldtune.data.lerobot import LeRobotDataset
from worldtune.errors import EvaluationError
from worldtune.scene.detector import SuccessDetector
from worldtune.scene.policies import panel, rollout
from worldtune.scene.sim import SceneEnv
from worldtune.scene.task import SceneTask
from worldtune.scene.writer import write_demo_dataset

VIEWS = ("exterior_1_left", "exterior_2_left")


def test_agrees_with_the_simulators_predicate_on_rollouts():
    """Seeds the detector's thresholds were not chosen on; every policy of the panel, so both verdicts occur."""
    env = SceneEnv(cameras=())
    agree, truth = [], []
    for p in panel():
        for seed in range(3000, 3008):
            r = rollout(env, p, SceneTask.draw(np.random.default_rng([seed, 99])), seed, views=VIEWS)
            verdict = SuccessDetector(r.cameras)(r.views, r.task)
            agree.append(verdict.success == r.success)
            truth.append(r.success)
    assert 0.3 < np.mean(truth) < 0.7
    assert np.mean(agree) >= 0.95


def test_judges_a_written_datasets_clips(tmp_path):
    """The dataset's own videos (h264): every episode's clip is a success, but the one whose arm missed."""
    root = write_demo_dataset(tmp_path / "ds", episodes=4, failed=(2,), workers=1)
    ds = LeRobotDataset(root)
    detector = SuccessDetector.from_cameras_json(root / "meta" / "cameras.json", last=3)
    verdicts = []
    for ep in ds.episodes:
        clips = {k: ds.episode_frames(ep, k) for k in ds.camera_keys() if "exterior" in k}
        verdicts.append(detector(clips, ep.task).success)
    assert verdicts == [True, True, False, True]


def test_frames_of_another_size_and_a_hidden_block():
    env = SceneEnv(cameras=())
    r = rollout(env, panel()[0], SceneTask("blue", "red"), 7, views=VIEWS)
    assert r.success
    big = {k: cv2.resize(v, (320, 192), interpolation=cv2.INTER_LINEAR) for k, v in r.views.items()}
    detector = SuccessDetector(r.cameras)
    verdict = detector(big, r.task.instruction)
    assert verdict.success and np.allclose(verdict.positions["blue"], r.info["blocks"]["blue"], atol=0.01)
    grey = {k: np.full_like(v, 128) for k, v in r.views.items()}
    hidden = detector(grey, r.task)
    assert hidden.success is None and "not found" in hidden.reason


def test_bad_inputs_are_named(tmp_path):
    env = SceneEnv(cameras=())
    r = rollout(env, panel()[0], SceneTask("red"), 1, views=VIEWS)
    detector = SuccessDetector(r.cameras)
    with pytest.raises(EvaluationError, match="two exterior cameras"):
        detector({"exterior_1_left": r.views["exterior_1_left"]}, r.task)
    with pytest.raises(EvaluationError, match=r"\[H, W, 3\] uint8"):
        detector({k: v.astype(np.float32) for k, v in r.views.items()}, r.task)
    bad = tmp_path / "cameras.json"
    bad.write_text("{}")
    with pytest.raises(EvaluationError, match=f"{bad}.*meta/cameras.json"):
        SuccessDetector.from_cameras_json(bad)
