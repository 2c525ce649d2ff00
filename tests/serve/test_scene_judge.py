"""`[serve.judge] kind = "scene"`: the scene's success detector judges recorded rollouts the way the VLM judge does
(judge.json beside the episode, ranked by `serve-summary`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from worldtune.config import load_config
from worldtune.data.lerobot import LeRobotDataset
from worldtune.errors import ConfigError, EvaluationError
from worldtune.scene.writer import write_demo_dataset
from worldtune.serve.ranking import summarize
from worldtune.serve.recorder import EpisodeRecorder
from worldtune.serve.scene_judge import SceneJudge, scene_judge


def _judge(cameras: str, *more: str) -> SceneJudge:
    cfg = load_config(None, ["--serve.judge.kind", "scene", "--serve.judge.cameras", cameras, *more])
    assert cfg.serve.judge.enabled
    return scene_judge(cfg.serve.judge)


def test_the_detector_judges_recorded_rollouts_and_serve_summary_ranks_them(tmp_path):
    """The scene's own episodes, recorded as `worldtune serve` records a rollout: the arm that missed (episode 2)
    is the one failure, every verdict is a judge.json of the VLM judge's format, and the ranking reads them."""
    root = write_demo_dataset(tmp_path / "ds", episodes=4, failed=(2,), workers=1)
    ds = LeRobotDataset(root)
    keys = {k.rsplit(".", 1)[-1]: k for k in ds.camera_keys()}
    first = ds.episode_frames(ds.episodes[0], ds.camera_keys()[0])
    recorder = EpisodeRecorder(tmp_path / "rec", ds.fps, keys, {r: first.shape[1:3] for r in keys}, ["x", "y", "z", "g"])
    judge = _judge(str(root / "meta" / "cameras.json"))
    verdicts = []
    for ep in ds.episodes:
        frames = {r: ds.episode_frames(ep, k) for r, k in keys.items()}
        rec = recorder.start({r: f[:1] for r, f in frames.items()}, ep.task, {"source/policy": "scripted"})
        rec.add({r: f[1:] for r, f in frames.items()}, np.zeros((len(frames["wrist_left"]) - 1, 4), np.float32))
        folder, written = recorder.write(rec)
        verdicts.append(judge(folder, ep.task, written, policy="scripted"))
    assert [v["success"] for v in verdicts] == [True, True, False, True]
    assert all(v["errors"] == 0 and v["rubrics"]["scene_detector"]["status"] == "ok" for v in verdicts)
    on_disk = json.loads((tmp_path / "rec" / "episode_000002" / "judge.json").read_text())
    assert on_disk["success"] is False and on_disk["progress"] == 0.0 and on_disk["format"] == "worldtune.serve.judge"
    row = summarize(tmp_path / "rec").policies[0]
    assert (row.policy, row.judged, row.successes) == ("scripted", 4, 3)
    assert judge.info()["judged"] == 4 and judge.info()["kind"] == "scene"
    again = judge(tmp_path / "rec" / "episode_000000", ds.episodes[0].task)  # re-judging: the videos read back
    assert again["success"] is True


def test_an_instruction_of_no_scene_task_is_a_judge_error_not_a_crash(tmp_path):
    root = write_demo_dataset(tmp_path / "ds", episodes=1, workers=1, length=8)
    episode = tmp_path / "ds"
    judge = _judge(str(root / "meta" / "cameras.json"))
    verdict = judge(episode, "open the drawer")
    assert verdict["success"] is None and verdict["errors"] == 1 and "not one of the scene's instructions" in \
        verdict["error"]
    assert judge.failed == 1


def test_settings_are_checked_at_start(tmp_path):
    with pytest.raises(ConfigError, match="serve.judge.cameras") as e:
        load_config(None, ["--serve.judge.kind", "scene"])
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="serve.record is none"):
        load_config(None, ["--serve.judge.kind", "scene", "--serve.judge.cameras", "c.json", "--serve.record", "none"])
    (tmp_path / "cameras.json").write_text("{}")
    with pytest.raises(EvaluationError, match="meta/cameras.json"):
        _judge(str(tmp_path / "cameras.json"))
