import numpy as np
import pytest

from worldtune.data.video import probe, read_frames, write_video
from worldtune.errors import DatasetError


def _frames(n=12, h=32, w=48):
    """Frames whose mean brightness encodes the index, so a wrong frame is easy to spot."""
    return np.stack([np.full((h, w, 3), (10 + 18 * i) % 250, np.uint8) for i in range(n)])


def test_roundtrip_and_probe(tmp_path):
    p = write_video(tmp_path / "a.mp4", _frames(), fps=15)
    info = probe(p)
    assert (info.num_frames, info.height, info.width, info.fps, info.codec) == (12, 32, 48, 15.0, "h264")
    back = read_frames(p)
    assert back.shape == (12, 32, 48, 3)
    assert np.abs(back.astype(int).mean(axis=(1, 2, 3)) - (10 + 18 * np.arange(12))).max() < 3


def test_span_and_indices(tmp_path):
    p = write_video(tmp_path / "a.mp4", _frames(), fps=15)
    x = read_frames(p, [2, 0, 2], start_time=5 / 15, end_time=9 / 15)  # span = frames 5..8
    assert np.abs(x.astype(int).mean(axis=(1, 2, 3)) - (10 + 18 * np.array([7, 5, 7]))).max() < 3
    with pytest.raises(DatasetError, match="truncated"):
        read_frames(p, [4], start_time=5 / 15, end_time=9 / 15)


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    def gen():
        yield from _frames(3)
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        write_video(tmp_path / "b.mp4", gen(), fps=15)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_and_truncated_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all" * 10)
    with pytest.raises(DatasetError, match="bad.mp4"):
        read_frames(bad)
    p = write_video(tmp_path / "t.mp4", _frames(30), fps=15)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    with pytest.raises(DatasetError, match="t.mp4"):
        read_frames(p, [29])
