"""`evaluate.mode = "actions"`: a forward-dynamics model under held-out episodes' real actions and another
episode's, scored per view and over the horizon, with the action-sensitivity figure (own - other actions)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from worldtune.config import load_config
from worldtune.errors import DatasetError
from worldtune.eval.dynamics import OTHER_SUFFIX, derangement
from worldtune.eval.scores import aggregate

pytestmark = pytest.mark.usefixtures("domain_tables")
ROLES = ("exterior_1", "exterior_2", "wrist")


# ------------------------------------------------------------------------------ the figure on hand-made rows
def _rows(own: dict, other: dict, model: str = "fd") -> list[dict]:
    """Rows as evaluate writes them: per clip a value per view (pixel_views) and their mean (the metric)."""
    out = []
    for label, per_clip in ((model, own), (model + OTHER_SUFFIX, other)):
        for name, views in per_clip.items():
            out.append({"model": label, "name": name, "seed": 0, "dynamic_psnr": float(np.mean(list(views.values()))),
                        "pixel_views": {r: {"dynamic_psnr": v} for r, v in views.items()}})
    return out


def test_action_sensitivity_is_paired_per_clip_and_per_view():
    """Own actions better on one view only: the overall figure is positive with a CI above 0, that view's too,
    the unchanged view reads exactly 0; a model whose videos do not depend on the actions reads 0 everywhere."""
    rng = np.random.default_rng(0)
    clips = [f"c{i}" for i in range(8)]
    base = {c: {"exterior_1": 20 + 5 * rng.random(), "wrist": 15 + 5 * rng.random()} for c in clips}  # clips differ a lot
    better = {c: {"exterior_1": v["exterior_1"] + 1.0 + 0.1 * rng.random(), "wrist": v["wrist"]} for c, v in base.items()}
    models, _ = aggregate(_rows(better, base), ["dynamic_psnr"])
    s = models["fd"]["action_sensitivity"]["dynamic_psnr"]
    assert s["other"] == "fd" + OTHER_SUFFIX and s["n_inputs"] == 8 and s["win_rate"] == 1.0
    assert 0.5 < s["mean"] < 0.6 and 0 < s["ci_low"] <= s["mean"] <= s["ci_high"]
    views = models["fd"]["action_sensitivity_views"]
    assert views["exterior_1"]["dynamic_psnr"]["ci_low"] > 0.9
    assert views["wrist"]["dynamic_psnr"]["mean"] == 0.0 and views["wrist"]["dynamic_psnr"]["win_rate"] == 0.5
    assert set(models["fd"]["views"]) == {"exterior_1", "wrist"}
    assert "vs_base" not in models["fd" + OTHER_SUFFIX]  # another drive of the same model, not a model
    ignores, _ = aggregate(_rows(base, base), ["dynamic_psnr"])
    assert ignores["fd"]["action_sensitivity"]["dynamic_psnr"]["mean"] == 0.0


def test_derangement_gives_every_clip_another_episode():
    episodes = [0, 0, 1, 2, 2, 3]
    p = derangement(episodes, seed=3)
    assert sorted(p) == list(range(6)) and all(episodes[p[i]] != episodes[i] for i in range(6))
    assert derangement(episodes, seed=3) == p and derangement(episodes, seed=4) != p
    with pytest.raises(DatasetError, match="at least two episodes"):
        derangement([5, 5, 5, 1], seed=0)  # one episode holds more than half: impossible
    with pytest.raises(DatasetError, match="at least two episodes"):
        derangement([7], seed=0)


# ------------------------------------------------------------------------------ the stage on tiny-cosmos3
def _cfg(fd_trained, out: Path, *extra: str):
    return load_config(None, [
        "--model.path", str(fd_trained["model"]), "--evaluate.mode", "actions", "--evaluate.out", str(out),
        "--evaluate.metrics", '["pixels", "ee_track_error"]', "--evaluate.workers", "1",
        "--evaluate.actions.dataset", str(fd_trained["dataset"]), "--evaluate.actions.steps", "1",
        "--evaluate.actions.adapters", f'[{{path = "{fd_trained["adapter"]}", name = "fd"}}]', *extra])


@pytest.mark.usefixtures("one_thread")
def test_actions_mode_scores_own_and_other_actions_per_view(fd_trained, tmp_path):
    from worldtune.eval.evaluate import run
    from worldtune.eval.report import run as report

    out = tmp_path / "eval"
    results = run(_cfg(fd_trained, out))
    models = results["models"]
    assert set(models) == {"base", "fd", "base" + OTHER_SUFFIX, "fd" + OTHER_SUFFIX, "real"}
    for label in ("base", "fd"):
        s = models[label]["action_sensitivity"]["dynamic_psnr"]
        assert s["n_inputs"] == 3 and s["mean"] is not None  # 3 held-out episodes: too few for an interval
        assert s["ci_low"] is None and "3 inputs in common" in s["reason"]
        assert set(models[label]["views"]) == set(ROLES) and set(models[label]["action_sensitivity_views"]) == set(ROLES)
    assert models["fd"]["vs_base"]["psnr"]["n_pairs"] == 3
    # the synthetic scene's gripper track: scored for every drive, own and other actions paired per clip (these
    # 5-frame clips keep the gripper above the view in some clips: those say so)
    assert results["end_effector"]["status"] == "ok" and models["real"]["ee_track_error"]["n"] >= 1
    sens = models["fd"]["action_sensitivity"]["ee_track_error"]
    assert sens["n_pairs"] == models["real"]["ee_track_error"]["n"]

    gen = out / "generations"
    rows = [json.loads(x) for x in (gen / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all((gen / r["video"]).is_file() and set(r["views"]) == set(ROLES) for r in rows)
    own = {(r["model"], r["name"]): r for r in rows if r["actions"] == "own"}
    for r in rows:
        if r["actions"] == "other":  # same clip and first frame, another episode's actions
            twin = own[(r["model"].removesuffix(OTHER_SUFFIX), r["name"])]
            assert r["actions_episode"] != r["episode_index"] == twin["episode_index"] == twin["actions_episode"]
    videos = [json.loads(x) for x in (out / "videos.jsonl").read_text().splitlines()]
    fd_row = next(v for v in videos if v["model"] == "fd")
    assert all(v.get("ee_track_error") is not None or "outside the view" in v["ee_track_error_reason"] for v in videos)
    assert len(fd_row["pixel_curves"]["dynamic_psnr"]) == 4  # one value per generated frame after the first

    before = {r["video"]: (gen / r["video"]).stat().st_mtime_ns for r in rows}
    run(_cfg(fd_trained, out))  # resumes: nothing is generated again
    assert {v: (gen / v).stat().st_mtime_ns for v in before} == before

    page = report(load_config(None, ["--report.eval", str(out), "--report.out", str(tmp_path / "report")]).report)
    text = Path(page["html"]).read_text()
    assert "Action sensitivity" in text and "Per camera view" in text
    assert "Action sensitivity" in Path(page["markdown"]).read_text()


def test_actions_mode_bad_inputs_are_one_line_errors(fd_trained, tmp_path, tiny_model_dir):
    import shutil

    from worldtune.errors import ConfigError, EvaluationError, GenerationError
    from worldtune.eval.evaluate import run

    with pytest.raises(EvaluationError, match="whole config"):
        run(_cfg(fd_trained, tmp_path / "a").evaluate)
    plain = Path(shutil.copytree(fd_trained["dataset"], tmp_path / "plain", ignore=shutil.ignore_patterns("cache")))
    (plain / "actions.json").unlink()
    with pytest.raises(DatasetError, match="prepared without actions"):
        run(_cfg(fd_trained, tmp_path / "b", "--evaluate.actions.dataset", str(plain)))
    with pytest.raises(ConfigError, match="has no"):
        run(_cfg(fd_trained, tmp_path / "c", "--model.path", str(tiny_model_dir)))
    with pytest.raises(GenerationError, match="worldtune_adapter.json"):
        run(_cfg(fd_trained, tmp_path / "d", "--evaluate.actions.adapters", f'[{{path = "{tmp_path}"}}]'))
