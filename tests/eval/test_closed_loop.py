"""Closed-loop action consistency: generated videos labelled back and compared with the actions that drove them."""

from __future__ import annotations

import numpy as np
import pytest

from worldtune.config import load_config
from worldtune.eval.closed_loop import REAL, score
from worldtune.eval.dynamics import OTHER_SUFFIX

NAMES = ["x", "y", "z", "gripper"]
MEAN = np.array([0.0, 0.0, 0.5, 1.0])


def _drives(n: int, rng) -> dict[str, np.ndarray]:
    """Chunks of 4 actions; entry `gripper` is constant (closed the whole time), as robot data often has."""
    out = {}
    for i in range(n):
        a = rng.normal(size=(4, 4))
        a[:, 2] += 0.5
        a[:, 3] = 1.0
        out[f"c{i}"] = a
    return out


def _videos(drives: dict[str, np.ndarray], donor=lambda name: name) -> list[dict]:
    return [{"views": {"clip": name}, "name": name, "drive": donor(name)} for name in drives]


def _score(videos, labels: dict[str, np.ndarray], drives):
    """The labeller reads the chunk a video "shows" (`labels`, one action more than the chunk, as an IDM)."""
    return score(videos, lambda views: labels[views["clip"]], drives, MEAN, NAMES, lambda v: v["views"])


def test_exact_labels_read_0_the_mean_action_1_and_constant_entries_are_listed():
    rng = np.random.default_rng(0)
    drives = _drives(8, rng)
    shown = {k: np.vstack([a, a[-1:]]) for k, a in drives.items()}
    exact = _score(_videos(drives), shown, drives)
    assert exact["nmse"] == 0.0 and exact["constant"] == ["gripper"] and set(exact["per_entry"]) == {"x", "y", "z"}
    assert exact["n_videos"] == exact["n_inputs"] == 8 and exact["ci_low"] == exact["ci_high"] == 0.0
    mean = _score(_videos(drives), {k: np.tile(MEAN, (5, 1)) for k in drives}, drives)
    assert mean["nmse"] == pytest.approx(1.0)
    noisy = _score(_videos(drives), {k: v + rng.normal(scale=0.3, size=v.shape) for k, v in shown.items()}, drives)
    assert 0.02 < noisy["ci_low"] <= noisy["nmse"] <= noisy["ci_high"] < 0.3


def test_a_model_that_ignores_its_actions_reads_near_1_or_worse():
    """Videos made under another episode's actions but showing the clip's own motion (a model that ignores the
    drive): labelled back, they disagree with the drive, unlike a model that follows it."""
    rng = np.random.default_rng(1)
    drives = _drives(10, rng)
    names = sorted(drives)
    donor = {n: names[(i + 1) % len(names)] for i, n in enumerate(names)}
    shown_own = {k: np.vstack([a, a[-1:]]) for k, a in drives.items()}
    follows = _score(_videos(drives, donor.get), {k: shown_own[donor[k]] for k in drives}, drives)
    ignores = _score(_videos(drives, donor.get), shown_own, drives)
    assert follows["nmse"] == 0.0 and ignores["ci_low"] > 0.8


def test_one_input_gives_no_interval_and_says_so():
    drives = _drives(1, np.random.default_rng(2))
    r = _score(_videos(drives), {k: np.tile(MEAN, (5, 1)) for k in drives}, drives)
    assert r["ci_low"] is None and "one input" in r["reason"]


@pytest.mark.usefixtures("domain_tables", "one_thread")
def test_actions_mode_labels_its_videos_back_with_an_idm(fd_trained, tmp_path):
    """The stage end to end on tiny-cosmos3 with an IDM trained on the same robot: every model drive and the real
    clips get a figure, in results.json and the report."""
    from worldtune.eval.evaluate import run
    from worldtune.eval.report import run as report
    from worldtune.idm.train import run as idm_train

    idm = tmp_path / "idm"
    idm_train(load_config(None, ["--idm.dataset", str(fd_trained["lerobot"]), "--idm.out", str(idm), "--idm.steps",
                                 "30", "--idm.view_height", "24", "--idm.view_width", "40"]))
    cfg = load_config(None, [
        "--model.path", str(fd_trained["model"]), "--evaluate.mode", "actions", "--evaluate.out", str(tmp_path / "ev"),
        "--evaluate.metrics", '["pixels"]', "--evaluate.workers", "1",
        "--evaluate.actions.dataset", str(fd_trained["dataset"]), "--evaluate.actions.steps", "1",
        "--evaluate.actions.idm", str(idm), "--evaluate.actions.labellers", '["idm", "cosmos3"]',
        "--trajectories.cosmos3.dataset", str(fd_trained["dataset"]), "--trajectories.cosmos3.steps", "1"])
    closed = run(cfg)["closed_loop"]
    assert set(closed) == {"idm", "cosmos3"}
    for per in closed.values():
        assert set(per["models"]) == {"base", "base" + OTHER_SUFFIX, REAL}
        for m in per["models"].values():
            assert m["n_videos"] == m["n_inputs"] == 3 and m["nmse"] is not None and m["nmse"] > 0
    report(load_config(None, ["--report.eval", str(tmp_path / "ev"), "--report.out", str(tmp_path / "r")]).report)
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Closed-loop action consistency (idm labeller)" in html and "(cosmos3 labeller)" in html
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Closed-loop action consistency (idm labeller)" in md and "(cosmos3 labeller)" in md
    assert "| real clip |" in md
