import hashlib
import os
import subprocess
import sys

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


_ENCODE_ONE_THREAD = """
import sys, numpy as np
from worldtune.data.video import VideoWriter
tex = np.random.default_rng(0).integers(0, 256, (240, 447, 3), np.uint8)
with VideoWriter(sys.argv[1], 16, codec=sys.argv[2], threads=1) as w:
    for t in range(5):
        w.write(np.roll(tex, 3 * t, axis=1)[:, :432])
"""


@pytest.mark.skipif(sys.platform != "linux", reason="MALLOC_PERTURB_ is glibc's")
@pytest.mark.parametrize("codec", ["libx264", "h264"])
def test_one_thread_x264_bytes_do_not_depend_on_the_heap(tmp_path, codec):
    """x264's macroblock tree reads memory it never wrote (valgrind reports it inside
    x264_encoder_encode), so one encoder thread alone did not make clips reproducible: prepare
    wrote different bytes now and then. glibc's MALLOC_PERTURB_=1 fills each new allocation with
    0xfe; with the macroblock tree on, this clip's bytes changed under it."""
    digests = []
    for perturb in (None, "1"):
        env = {k: v for k, v in os.environ.items() if k != "MALLOC_PERTURB_"}
        if perturb:
            env["MALLOC_PERTURB_"] = perturb
        out = tmp_path / f"clip_{perturb}.mp4"
        subprocess.run([sys.executable, "-c", _ENCODE_ONE_THREAD, str(out), codec], env=env, check=True)
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
