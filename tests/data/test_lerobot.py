import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from worldtune.data.lerobot import LeRobotDataset
from worldtune.data.video import write_video
from worldtune.errors import DatasetError
from worldtune.scene.episode import demo_episodes

from .conftest import H, W

WRIST = "observation.images.wrist_left"


def _close(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(int) - b.astype(int)).mean())


@pytest.mark.parametrize("fixture", ["v21_root", "v3_root"])
def test_reads_both_versions(fixture, request):
    ds = LeRobotDataset(request.getfixturevalue(fixture))
    ref = demo_episodes(5, height=H, width=W, failed=(1,) if fixture == "v21_root" else ())
    assert ds.version == ("v2.1" if fixture == "v21_root" else "v3.0")
    assert ds.fps == 15 and set(ds.cameras) == {f"observation.images.{n}" for n in
                                                ("exterior_1_left", "exterior_2_left", "wrist_left")}
    assert (ds.cameras[WRIST].height, ds.cameras[WRIST].width) == (H, W)
    assert [e.length for e in ds.episodes] == [e.length for e in ref]
    assert [e.task for e in ds.episodes] == [e.task for e in ref]
    # the right frames of every episode, including later episodes of a concatenated v3 file
    for ep, r in zip(ds.episodes, ref):
        last = ep.length - 1
        got = ds.episode_frames(ep, WRIST, [0, last])
        assert _close(got[1], r.render_view("wrist", last)) < 12  # h264 at 48x80 loses some detail
        assert _close(got[1], r.render_view("wrist", last)) < _close(got[1], r.render_view("wrist", last - 3))


def test_v3_episodes_share_files(v3_root):
    ds = LeRobotDataset(v3_root)
    files = [ds.episodes[i].spans[WRIST].path.name for i in range(5)]
    assert files == ["file-000.mp4", "file-000.mp4", "file-001.mp4", "file-001.mp4", "file-002.mp4"]
    assert ds.episodes[1].spans[WRIST].start_time == pytest.approx(ds.episodes[0].length / 15)


def test_success_flag_from_data(v21_root):
    ds = LeRobotDataset(v21_root)
    assert [e.success for e in ds.episodes] == [True, False, True, True, True]


def test_v3_trusts_indices_over_wrong_data_file_index(v3_copy):
    f = v3_copy / "meta/episodes/chunk-000/file-000.parquet"
    t = pq.read_table(f)
    t = t.set_column(t.schema.get_field_index("data/file_index"), "data/file_index", pa.array([7] * t.num_rows))
    pq.write_table(t, f)
    ds = LeRobotDataset(v3_copy)
    assert [e.length for e in ds.episodes] == [e.length for e in demo_episodes(5, height=H, width=W)]
    assert ds.episode_frames(ds.episodes[4], WRIST, [0]).shape == (1, H, W, 3)


def test_chw_shape_and_legacy_video_info(v21_copy):
    p = v21_copy / "meta/info.json"
    info = json.loads(p.read_text())
    f = info["features"][WRIST]
    f["shape"], f["names"] = [3, H, W], ["channels", "height", "width"]
    f["video_info"] = f.pop("info")
    f["video_info"]["video.fps"] = 30.0
    p.write_text(json.dumps(info))
    cam = LeRobotDataset(v21_copy).cameras[WRIST]
    assert (cam.height, cam.width, cam.fps) == (H, W, 30.0)


def test_invalid_utf8_task_becomes_none(v21_copy):
    p = v21_copy / "meta/episodes.jsonl"
    lines = p.read_bytes().splitlines()
    lines[2] = b'{"episode_index": 2, "tasks": ["bad \xff\xfe text"], "length": %d}' % json.loads(lines[2])["length"]
    p.write_bytes(b"\n".join(lines) + b"\n")
    ds = LeRobotDataset(v21_copy)
    assert ds.episodes[2].task is None and ds.episodes[1].task


def test_plain_layout(tmp_path):
    (tmp_path / "videos").mkdir()
    (tmp_path / "metas").mkdir()
    for i, text in enumerate([b"pick the cup", b"\xff\xfe"]):
        write_video(tmp_path / "videos" / f"clip{i}.mp4", np.zeros((9 + i, 16, 16, 3), np.uint8), fps=16)
        (tmp_path / "metas" / f"clip{i}.txt").write_bytes(text)
    ds = LeRobotDataset(tmp_path)
    assert ds.version == "plain" and list(ds.cameras) == ["video"]
    assert [(e.length, e.task) for e in ds.episodes] == [(9, "pick the cup"), (10, None)]


def test_not_a_dataset(tmp_path):
    with pytest.raises(DatasetError, match="is not a dataset: expected meta/info.json"):
        LeRobotDataset(tmp_path)
    with pytest.raises(DatasetError, match="does not exist"):
        LeRobotDataset(tmp_path / "nope")
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_text('{"codebase_version": "v1.6"}')
    with pytest.raises(DatasetError, match="v1.6 is not supported"):
        LeRobotDataset(tmp_path)
