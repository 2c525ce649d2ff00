"""`worldtune trajectories`: generated videos + IDM -> a LeRobot v3.0 dataset that worldtune reads back exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.idm.conftest import CAMERAS, make_generations
from worldtune.cli import main
from worldtune.config import load_config
from worldtune.data.lerobot import LeRobotDataset
from worldtune.data.video import read_frames
from worldtune.errors import ConfigError
from worldtune.idm.label import ActionLabeler
from worldtune.trajectories import TrajectoryExport, run


@pytest.fixture(scope="module")
def generations(demo_lerobot, tmp_path_factory) -> Path:
    """Two models x two inputs x two seeds = 8 videos of three cameras at 15 fps."""
    return make_generations(demo_lerobot, tmp_path_factory.mktemp("gen") / "generations", [1, 4], seeds=(0, 1),
                            models=("base", "lora"))


def export_config(gen: Path, idm: Path, out: Path, *extra: str):
    return load_config(None, ["--trajectories.generations", str(gen), "--trajectories.idm", str(idm),
                              "--trajectories.out", str(out), "--trajectories.device", "cpu", *extra])


def episode_table(root: Path) -> list[dict]:
    return pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_round_trip_frames_actions_and_times(generations, trained_idm, tmp_path, codec):
    idm_run, _ = trained_idm
    out = tmp_path / "traj"
    summary = run(export_config(generations, idm_run, out, "--trajectories.codec", codec,
                                "--trajectories.episodes_per_file", "3"))
    assert summary["episodes"] == {"real": 0, "synthetic": 8}
    ds = LeRobotDataset(out)
    info = ds.info
    assert ds.version == "v3.0" and info["fps"] == 15 and info["total_episodes"] == 8
    assert sorted(ds.cameras) == sorted(CAMERAS.values())
    for key in CAMERAS.values():
        f = info["features"][key]
        assert f["dtype"] == "video" and f["shape"] == [32, 56, 3] and f["info"]["video.codec"] == codec
        assert f["info"]["video.fps"] == 15
    assert info["features"]["action"]["names"] == ["x", "y", "z", "gripper"]
    rows = [json.loads(x) for x in (generations / "generations.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: (r["model"], r["name"], r["seed"]))
    episodes = episode_table(out)
    data = pq.read_table(sorted((out / "data").rglob("*.parquet"))[0]).to_pylist()
    assert len(list((out / "data").rglob("*.parquet"))) == 3  # 8 episodes, 3 per file
    labeler = ActionLabeler.load(idm_run, device="cpu")
    all_data = [r for f in sorted((out / "data").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    for ep, row, meta in zip(ds.episodes, rows, episodes):
        assert (meta["source/model"], meta["source/seed"], meta["source/params_hash"]) == (
            row["model"], row["seed"], row["params_hash"])
        views = {}
        for role, key in CAMERAS.items():
            generated = read_frames(generations / row["views"][role])
            exported = ds.episode_frames(ep, key)
            assert np.array_equal(exported, generated), (codec, key)  # lossless: the very same frames
            views[role] = generated
            # per-camera time span agrees with the fps and the episode length
            assert meta[f"videos/{key}/to_timestamp"] - meta[f"videos/{key}/from_timestamp"] == pytest.approx(ep.length / 15)
        mine = [r for r in all_data if r["episode_index"] == ep.index]
        assert len(mine) == ep.length == meta["dataset_to_index"] - meta["dataset_from_index"]
        assert [r["index"] for r in mine] == list(range(meta["dataset_from_index"], meta["dataset_to_index"]))
        assert np.allclose([r["timestamp"] for r in mine], np.arange(ep.length, dtype=np.float32) / 15)
        assert np.array_equal(np.array([r["action"] for r in mine], np.float32), labeler.label(views))
        assert all(r["is_synthetic"] for r in mine) and ep.task == row["instruction"]
    assert data[0]["episode_index"] == 0
    tasks = pq.read_table(out / "meta" / "tasks.parquet")
    assert set(tasks.column("task").to_pylist()) == {r["instruction"] for r in rows}
    stats = json.loads((out / "meta" / "stats.json").read_text())
    assert len(stats["action"]["mean"]) == 4 and np.array(stats[CAMERAS["wrist"]]["mean"]).shape == (3, 1, 1)


def _evaluation(folder: Path, gen: Path) -> Path:
    """An evaluation folder in `worldtune evaluate`'s format with known scores."""
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"metrics": ["sampson_temporal", "judge:my_rubric"],
                                                     "lower_is_better": ["sampson_temporal"]}))
    rows = []
    for r in (json.loads(x) for x in (gen / "generations.jsonl").read_text().splitlines()):
        # sampson: 0.5 for seed 0, 2.5 for seed 1; judge: 5 for lora, 2 for base
        rows.append({"model": r["model"], "name": r["name"], "seed": r["seed"], "run": str(gen), "reference": False,
                     "sampson_temporal": 0.5 + 2 * r["seed"], "judge:my_rubric": 5 if r["model"] == "lora" else 2})
    rows.append({"model": "real", "name": "clip001", "seed": None, "reference": True, "sampson_temporal": 0.1})
    (folder / "videos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_thresholds_keep_only_passing_trajectories(generations, trained_idm, tmp_path):
    idm_run, _ = trained_idm
    ev = _evaluation(tmp_path / "eval", generations)
    out = tmp_path / "traj"
    summary = run(export_config(generations, idm_run, out, "--trajectories.evaluation", str(ev),
                                "--trajectories.thresholds", '{sampson_temporal = 1.0, "judge:my_rubric" = 4}'))
    eps = episode_table(out)
    # kept: lora (judge 5 >= 4) with seed 0 (sampson 0.5 <= 1.0): the two inputs
    assert [(e["source/model"], e["source/seed"]) for e in eps] == [("lora", 0), ("lora", 0)]
    assert [e["score/sampson_temporal"] for e in eps] == [0.5, 0.5] and eps[0]["score/judge:my_rubric"] == 5
    assert summary["dropped_by_threshold"] == {"sampson_temporal": 4, "judge:my_rubric": 2}  # first failing metric
    # without thresholds every episode is kept and carries its scores
    run(export_config(generations, idm_run, tmp_path / "all", "--trajectories.evaluation", str(ev)))
    assert len(episode_table(tmp_path / "all")) == 8
    with pytest.raises(ConfigError, match="results.json does not list"):
        TrajectoryExport(export_config(generations, idm_run, tmp_path / "x", "--trajectories.evaluation", str(ev),
                                       "--trajectories.thresholds", "{judge_physics = 3}"))


def test_merge_with_the_real_dataset_keeps_features_identical(generations, trained_idm, demo_lerobot, tmp_path):
    idm_run, _ = trained_idm
    run(export_config(generations, idm_run, tmp_path / "synthetic", "--trajectories.models", '["lora"]'))
    out = tmp_path / "merged"
    summary = run(export_config(generations, idm_run, out, "--trajectories.models", '["lora"]',
                                "--trajectories.merge_with", str(demo_lerobot)))
    real = LeRobotDataset(demo_lerobot)
    assert summary["episodes"] == {"real": len(real), "synthetic": 4}
    merged, synthetic = LeRobotDataset(out), LeRobotDataset(tmp_path / "synthetic")
    assert merged.info["features"] == synthetic.info["features"]
    eps = episode_table(out)
    assert [e["is_synthetic"] for e in eps] == [False] * len(real) + [True] * 4
    from worldtune.idm.data import read_actions

    data = [r for f in sorted((out / "data").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    real_actions = read_actions(real, "action")
    first = [r for r in data if r["episode_index"] == 0]
    assert np.allclose([r["action"] for r in first], real_actions[real.episodes[0].index])
    assert not any(r["is_synthetic"] for r in first)
    assert merged.episode_frames(merged.episodes[0], CAMERAS["wrist"]).shape[1:] == (32, 56, 3)


def _one_line_error(args: list[str], capsys) -> str:
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1, err
    return err


def test_bad_inputs_are_one_line_errors(generations, trained_idm, demo_lerobot, tmp_path, capsys):
    idm_run, _ = trained_idm
    base = ["trajectories", "--trajectories.idm", str(idm_run), "--trajectories.device", "cpu"]
    # a grid folder written without its camera views
    noviews = make_generations(demo_lerobot, tmp_path / "noviews", [1], split_views=False)
    err = _one_line_error(base + ["--trajectories.generations", str(noviews), "--trajectories.out", str(tmp_path / "o1")], capsys)
    assert "generations.jsonl" in err and "split_views" in err
    # a view file missing on disk (an incomplete folder)
    broken = Path(shutil.copytree(generations, tmp_path / "broken"))
    (broken / "lora" / "clip004_s1" / "wrist.mp4").unlink()
    err = _one_line_error(base + ["--trajectories.generations", str(broken), "--trajectories.out", str(tmp_path / "o2")], capsys)
    assert str(broken / "lora" / "clip004_s1" / "wrist.mp4") in err
    # a real dataset whose actions are not the IDM's (another robot)
    other = Path(shutil.copytree(demo_lerobot, tmp_path / "other"))
    info = json.loads((other / "meta" / "info.json").read_text())
    info["features"]["action"]["names"] = ["j1", "j2", "j3", "j4"]
    (other / "meta" / "info.json").write_text(json.dumps(info))
    err = _one_line_error(base + ["--trajectories.generations", str(generations), "--trajectories.out",
                                  str(tmp_path / "o3"), "--trajectories.merge_with", str(other)], capsys)
    assert str(other / "meta" / "info.json") in err and "IDM" in err
    # an IDM whose cameras are not the videos' cameras
    odd = Path(shutil.copytree(idm_run / "idm", tmp_path / "odd_idm"))
    meta = json.loads((odd / "idm.json").read_text())
    meta["cameras"] = {"left": "a", "right": "b", "hand": "c"}
    (odd / "idm.json").write_text(json.dumps(meta))
    err = _one_line_error(["trajectories", "--trajectories.idm", str(odd), "--trajectories.generations", str(generations),
                           "--trajectories.out", str(tmp_path / "o4")], capsys)
    assert "info.json" in err and "idm.cameras" in err
    # an output folder that exists
    (tmp_path / "exists").mkdir()
    err = _one_line_error(base + ["--trajectories.generations", str(generations), "--trajectories.out",
                                  str(tmp_path / "exists")], capsys)
    assert str(tmp_path / "exists") in err and "already exists" in err


def test_a_killed_export_leaves_no_dataset_and_restarts_clean(generations, trained_idm, tmp_path, monkeypatch):
    idm_run, _ = trained_idm
    out = tmp_path / "traj"
    calls = {"n": 0}
    real_label = ActionLabeler.label

    def dying_label(self, views):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # killed mid-export
        return real_label(self, views)

    monkeypatch.setattr(ActionLabeler, "label", dying_label)
    with pytest.raises(KeyboardInterrupt):
        run(export_config(generations, idm_run, out))
    assert not out.exists() and not (tmp_path / ".traj.partial").exists()
    monkeypatch.setattr(ActionLabeler, "label", real_label)
    # a SIGKILL leaves the temp folder behind: the next run deletes it and writes the whole dataset
    (tmp_path / ".traj.partial" / "videos").mkdir(parents=True)
    summary = run(export_config(generations, idm_run, out))
    assert summary["episodes"]["synthetic"] == 8 and len(LeRobotDataset(out)) == 8
    assert not (tmp_path / ".traj.partial").exists()


def test_baseline_rows_never_become_trajectories(generations, trained_idm, tmp_path):
    """A folder's baselines (the first frame held, the real clip through the VAE) are no model's videos: left out,
    counted, and not selectable by trajectories.models."""
    idm_run, _ = trained_idm
    folder = Path(shutil.copytree(generations, tmp_path / "with_baselines"))
    rows = [json.loads(x) for x in (folder / "generations.jsonl").read_text().splitlines()]
    added = []
    for r in [r for r in rows if r["model"] == "lora"]:
        label = "first_frame" if r["seed"] == 0 else "vae_round_trip"  # any playable files will do here
        video = f"{label}/{r['name']}.mp4"
        (folder / label).mkdir(exist_ok=True)
        shutil.copyfile(folder / r["video"], folder / video)
        added.append({**r, "model": label, "video": video, "baseline": True, "views": r["views"]})
    (folder / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + added))
    summary = run(export_config(folder, idm_run, tmp_path / "traj"))
    assert summary["episodes"] == {"real": 0, "synthetic": 8} and summary["baselines_skipped"] == len(added) == 4
    assert {e["source/model"] for e in episode_table(tmp_path / "traj")} == {"base", "lora"}
    with pytest.raises(ConfigError, match="baselines are never labelled"):
        TrajectoryExport(export_config(folder, idm_run, tmp_path / "x", "--trajectories.models", '["first_frame"]'))
