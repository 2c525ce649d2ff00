"""The inverse-dynamics model: it learns the demo arm's actions, labels by averaging chunks, resumes exactly."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tests.idm.conftest import idm_config
from worldtune.cli import main
from worldtune.errors import CheckpointError
from worldtune.idm.label import ActionLabeler
from worldtune.idm.model import InverseDynamicsModel, load_idm


def test_idm_beats_the_mean_action_by_half_on_held_out_episodes(trained_idm):
    run, summary = trained_idm
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < 0.2 * losses[0]  # training loss falls
    report = json.loads((run / "idm_report.json").read_text())
    m = report["metrics"]
    assert report["action_names"] == ["x", "y", "z", "gripper"]
    assert set(m) == {"idm", "mean_action", "previous_action"}
    assert set(m["idm"]["mse"]) == {"x", "y", "z", "gripper"} and "gripper_accuracy" in m["idm"]
    assert report["episodes"]["held_out"] and not set(report["episodes"]["held_out"]) & set(report["episodes"]["train"])
    # the must-show: held-out action MSE at least 50% below the mean-action baseline
    assert m["idm"]["normalised_mse"] <= 0.5 * m["mean_action"]["normalised_mse"], m
    assert summary["mse_reduction_vs_mean_action"] >= 0.5
    assert m["idm"]["gripper_accuracy"] > m["mean_action"]["gripper_accuracy"]


def test_labeler_reproduces_the_report_and_loads_from_the_run_folder(trained_idm, demo_lerobot):
    run, _ = trained_idm
    report = json.loads((run / "idm_report.json").read_text())
    labeler = ActionLabeler.load(run, device="cpu")
    assert labeler.roles == ["exterior_1", "exterior_2", "wrist"] and labeler.action_names == ["x", "y", "z", "gripper"]
    from worldtune.data.lerobot import LeRobotDataset
    from worldtune.idm.data import load_episodes

    held = report["episodes"]["held_out"]
    eps, _ = load_episodes(LeRobotDataset(demo_lerobot), labeler.meta["cameras"], "action", labeler.size)
    eps = [e for e in eps if e.index in held]
    err = np.concatenate([labeler.label_prepared(e.views) - e.actions for e in eps])
    assert np.allclose((err ** 2).mean(0), [report["metrics"]["idm"]["mse"][n] for n in labeler.action_names], rtol=1e-4)


class _StartModel(InverseDynamicsModel):
    """Predicts, for every entry of its chunk, the index of the window's first frame (encoded in its pixels)."""

    def forward(self, windows):
        t = windows[:, 0, 0, 0, 0, 0].float()
        return t[:, None, None].expand(-1, self.horizon, self.action_dim).clone()


def test_overlapping_chunks_are_averaged_per_frame():
    horizon, length = 3, 7
    model = _StartModel(1, horizon + 1, horizon, 2, 8)
    meta = {"cameras": {"cam": "k"}, "architecture": {"height": 8, "width": 8}, "action_names": ["a", "b"]}
    frames = np.zeros((1, length, 8, 8, 3), np.uint8)
    frames[0, :, 0, 0, 0] = np.arange(length)
    got = ActionLabeler(model, meta, batch=2).label_prepared(frames)[:, 0]
    # frame j is covered by the chunks starting at max(0, j-H+1)..j: the mean of those starts
    want = [np.mean(range(max(0, j - horizon + 1), j + 1)) for j in range(length)]
    assert np.allclose(got, want)


@pytest.mark.usefixtures("one_thread")
def test_resume_continues_bit_for_bit(demo_lerobot, tmp_path):
    from worldtune.idm.train import run

    args = ("--idm.max_episodes", "4", "--idm.view_height", "16", "--idm.view_width", "24", "--idm.channels", "8",
            "--idm.batch_size", "4", "--idm.checkpoint.every", "3")
    straight = run(idm_config(demo_lerobot, tmp_path / "a", "--idm.steps", "6", *args))
    run(idm_config(demo_lerobot, tmp_path / "b", "--idm.steps", "3", *args))
    resumed = run(idm_config(demo_lerobot, tmp_path / "b", "--idm.steps", "6", "--idm.resume", "auto", *args))
    assert resumed["steps"] == straight["steps"] == 6
    a, _ = load_idm(tmp_path / "a")
    b, _ = load_idm(tmp_path / "b")
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(va, vb), k
    # another setting is refused, not silently mixed in
    with pytest.raises(CheckpointError, match="horizon"):
        run(idm_config(demo_lerobot, tmp_path / "b", "--idm.steps", "8", "--idm.resume", "auto", "--idm.horizon", "2", *args))


def test_dataset_without_actions_is_a_one_line_error(demo_lerobot, tmp_path, capsys):
    root = shutil.copytree(demo_lerobot, tmp_path / "noact")
    info = json.loads((root / "meta" / "info.json").read_text())
    del info["features"]["action"]
    (root / "meta" / "info.json").write_text(json.dumps(info))
    code = main(["idm", "train", "--idm.dataset", str(root), "--idm.out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert str(root / "meta" / "info.json") in err and "idm.action_key" in err


def test_normalised_errors_leave_constant_entries_out_and_the_oracle_is_named(capsys):
    """7-D actions whose last 3 entries never move in training: those are listed, not averaged in as 0 error."""
    from worldtune.idm.train import held_out_report, print_report

    rng = np.random.default_rng(0)
    names = [f"a{i}" for i in range(7)]
    truth = np.concatenate([rng.normal(0, 1, (40, 4)), np.zeros((40, 3))], axis=1)
    pred = truth + np.concatenate([rng.normal(0, 0.5, (40, 4)), np.zeros((40, 3))], axis=1)
    std = np.array([1.0] * 4 + [0.0] * 3)
    m = held_out_report([truth], [pred], np.zeros(7), std, names, None)
    mse = np.array([m["idm"]["mse"][n] for n in names[:4]])
    assert m["idm"]["normalised_mse"] == pytest.approx(mse.mean())  # over the 4 that vary: ~0.25, not ~0.14
    report = {"metrics": m, "episodes": {"held_out": [1]}, "held_out_frames": 40, "action_names": names,
              "gripper": None, "constant_entries": ["a4", "a5", "a6"]}
    print_report(report)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out, out
    out = " ".join(out.split())
    assert "previous action (ORACLE)" in out and "oracle: it is given the true previous action" in out
    assert "over the 4 entries that vary; constant in training, left out: a4, a5, a6" in out
