"""`worldtune trajectories` with `trajectories.source`: videos without actions (a LeRobot dataset of any robot,
a folder of videos) labelled by the IDM into a LeRobot v3.0 dataset."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.idm.conftest import CAMERAS, idm_config
from worldtune.cli import main
from worldtune.config import load_config
from worldtune.data.lerobot import LeRobotDataset
from worldtune.data.video import write_video
from worldtune.idm.data import read_actions
from worldtune.trajectories import run


def source_config(source, idm, out, *extra: str):
    return load_config(None, ["--trajectories.source", str(source), "--trajectories.idm", str(idm),
                              "--trajectories.out", str(out), "--trajectories.device", "cpu", *extra])


def test_a_lerobot_dataset_is_labelled_close_to_its_recorded_actions(trained_idm, demo_lerobot, tmp_path, capsys):
    """The demo robot's own dataset, read as if it had no actions: every episode becomes one of the new dataset,
    same frames count, and the IDM's labels are far nearer the recorded actions than the mean action is."""
    run_dir, _ = trained_idm
    summary = run(source_config(demo_lerobot, run_dir, tmp_path / "out"))
    src, out = LeRobotDataset(demo_lerobot), LeRobotDataset(tmp_path / "out")
    assert out.version == "v3.0" and len(out) == len(src) == summary["episodes"]["labelled"]
    assert set(out.cameras) == set(CAMERAS.values()) and summary["cameras"] == CAMERAS
    truth, labels = read_actions(src, "action"), read_actions(out, "action")
    assert all(len(labels[e.index]) == e.length for e in src.episodes)
    true = np.concatenate([truth[i] for i in sorted(truth)])
    got = np.concatenate([labels[i] for i in sorted(labels)])
    assert ((got - true) ** 2).mean() < 0.5 * ((true.mean(0) - true) ** 2).mean()
    rows = pq.read_table(tmp_path / "out" / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    assert {r["source/actions"] for r in rows} == {"idm"} and not any(r["is_synthetic"] for r in rows)
    assert [r["source/episode_index"] for r in rows] == [e.index for e in src.episodes]
    assert "labelled episodes" in capsys.readouterr().out


def test_a_folder_of_videos_is_labelled_by_a_one_camera_idm(demo_lerobot, tmp_path):
    """Plain videos (videos/*.mp4, tasks in metas/*.txt) of another size: the one camera feeds the IDM's one role."""
    from worldtune.idm.train import run as train_idm

    idm = tmp_path / "idm"
    train_idm(idm_config(demo_lerobot, idm, "--idm.steps", "3", "--idm.cameras", '{wrist = "%s"}' % CAMERAS["wrist"],
                         "--idm.view_height", "24", "--idm.view_width", "40"))
    ds = LeRobotDataset(demo_lerobot)
    folder = tmp_path / "phone"
    for i, size in enumerate([(48, 80), (36, 64)]):
        frames = ds.episode_frames(ds.episodes[i], CAMERAS["wrist"])[:, :size[0], :size[1]]
        write_video(folder / "videos" / f"take{i}.mp4", np.ascontiguousarray(frames), 15)
        (folder / "metas").mkdir(exist_ok=True)
        (folder / "metas" / f"take{i}.txt").write_text(f"task {i}")
    assert main(["trajectories", "--trajectories.source", str(folder), "--trajectories.idm", str(idm),
                 "--trajectories.out", str(tmp_path / "out"), "--trajectories.device", "cpu"]) == 0
    out = LeRobotDataset(tmp_path / "out")
    assert list(out.cameras) == ["video"] and len(out) == 2 and [e.task for e in out.episodes] == ["task 0", "task 1"]
    second = out.episode_frames(out.episodes[1], "video")
    assert second.shape[1:3] == (48, 80)  # resized to the first video's size
    rows = pq.read_table(tmp_path / "out" / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    assert [r["source/name"] for r in rows] == ["take0", "take1"]


def test_cameras_the_idm_cannot_find_and_generation_options_are_one_line_errors(trained_idm, tmp_path, capsys):
    run_dir, _ = trained_idm
    folder = tmp_path / "phone"
    write_video(folder / "videos" / "a.mp4", np.zeros((5, 32, 32, 3), np.uint8), 15)
    args = ["trajectories", "--trajectories.source", str(folder), "--trajectories.idm", str(run_dir),
            "--trajectories.out", str(tmp_path / "out"), "--trajectories.device", "cpu"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "has cameras ['video']; the IDM reads" in err and "--idm.cameras" in err and "Traceback" not in err
    assert main([*args, "--trajectories.thresholds", "{sampson_temporal = 1.0}"]) == 1
    assert "select and score generated videos" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_fractional_frame_rate_is_refused(tmp_path):
    from worldtune.errors import DatasetError
    from worldtune.idm.label_dataset import whole_fps

    folder = tmp_path / "v"
    write_video(folder / "videos" / "a.mp4", np.zeros((5, 32, 32, 3), np.uint8), 12.5)
    with pytest.raises(DatasetError, match="frame rate 12.5 is not a whole number of frames per second"):
        whole_fps(LeRobotDataset(folder))
