import errno
import hashlib
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from worldtune.config import PrepareConfig
from worldtune.data import prepare as prep
from worldtune.data.layout import i420_exact, layout_from_dict
from worldtune.data.lerobot import LeRobotDataset
from worldtune.data.video import VideoWriter, probe, read_frames, write_video
from worldtune.errors import ConfigError, DatasetError, DiskFullError
from worldtune.scene.episode import demo_episodes
from worldtune.scene.writer import write_demo_dataset

from .conftest import H, W

LENGTHS = [e.length for e in demo_episodes(5, height=H, width=W)]  # [34, 30, 27, 10, 23]
WRIST = "observation.images.wrist_left"


def _cfg(src, out, **kw) -> PrepareConfig:
    base = dict(source=str(src), out=str(out), height=32, width=56, num_frames=17, workers=1)
    return PrepareConfig(**{**base, **kw})


def _manifest(out):
    return pq.read_table(out / "manifest.parquet").to_pylist()


def _v21_video(root, key, ep):
    return root / "videos" / "chunk-000" / key / f"episode_{ep:06d}.mp4"


@pytest.mark.parametrize("fixture", ["v21_root", "v3_root"])
def test_default_grid_counts_and_format(fixture, request, tmp_path):
    out = tmp_path / "out"
    rep = prep.run(_cfg(request.getfixturevalue(fixture), out), quiet=True)
    c = rep["counts"]
    assert LENGTHS[3] < 17 <= min(LENGTHS[:3] + LENGTHS[4:])
    assert (c["episodes_read"], c["episodes_kept"], c["clips"], c["dropped"]) == (5, 4, 4, {"too_short": 1})
    assert (c["train_clips"], c["val_clips"]) == (3, 1)
    info = json.loads((out / "info.json").read_text())
    assert info["format"] == "worldtune.dataset" and info["version"] == 1 and info["num_frames"] == 17
    rows = _manifest(out)
    assert sorted(r["episode_index"] for r in rows) == [0, 1, 2, 4]
    r = rows[0]
    assert r["prompt"].startswith("A multi-view video shows that a robot picks up the ")
    assert r["prompt"].endswith("The robot " + r["task"]) and r["cameras"] == ["exterior_1", "exterior_2", "wrist"]
    frames = read_frames(out / r["video"])
    assert frames.shape == (17, 32, 56, 3)
    parts = layout_from_dict(info["layout"]).split(frames)
    assert parts["wrist"].shape == (17, 16, 28, 3)
    assert (out / "cameras.json").is_file() and (out / "length_histogram.png").is_file()
    assert rep["episodes_kept_by_stride"]["1"] == 4 and rep["episodes_kept_by_stride"]["2"] == 1
    assert "too_short" in (out / "report.md").read_text()


def test_sliding_windows_stride_and_separate(v3_root, tmp_path):
    out = tmp_path / "out"
    rep = prep.run(_cfg(v3_root, out, num_frames=5, stride=2, clip_policy="sliding", overlap=1,
                        layout="separate", val_fraction=0.0, prompt_template="plain"), quiet=True)
    need, step = 9, 8  # (5-1)*2+1 source frames; windows start every (5-1)*2 frames
    expect = sum(len(range(0, n - need + 1, step)) for n in LENGTHS)
    assert rep["counts"]["clips"] == expect == rep["counts"]["train_clips"]
    rows = _manifest(out)
    assert len({r["clip_id"] for r in rows}) == expect
    views = json.loads(rows[1]["views"])
    assert rows[1]["video"] is None and set(views) == {"exterior_1", "exterior_2", "wrist"}
    assert probe(out / views["wrist"]).num_frames == 5 and rows[1]["fps"] == 7.5
    assert rows[1]["end_frame"] - rows[1]["start_frame"] == need


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(255.0 ** 2 / np.mean((a.astype(float) - b.astype(float)) ** 2)))


@pytest.mark.parametrize("layout, height, width", [("grid", 48, 80), ("separate", 24, 40)])
def test_clips_from_yuv_planes_match_the_rgb_path(v3_root, tmp_path, layout, height, width):
    """Sizes where each camera is resized on whole chroma pixels (48x80 -> 24x40) take the plane path;
    the clips match resizing and tiling the RGB frames (the former path) within encoding noise."""
    assert i420_exact((H, W), 24, 40)
    out = tmp_path / "out"
    prep.run(_cfg(v3_root, out, layout=layout, height=height, width=width, stride=2, clip_policy="sliding",
                  num_frames=9, overlap=0, val_fraction=0.0, prompt_template="plain"), quiet=True)
    info = json.loads((out / "info.json").read_text())
    lay = layout_from_dict(info["layout"])
    ds = LeRobotDataset(v3_root)
    rows = _manifest(out)
    assert len(rows) == 4
    for r in rows:
        ep = next(e for e in ds.episodes if e.index == r["episode_index"])
        idx = list(range(r["start_frame"], r["end_frame"], r["stride"]))
        views = {role: ds.episode_frames(ep, key, idx) for role, key in info["cameras"].items()}
        want = lay.pack(views)
        got = ({role: read_frames(out / p) for role, p in json.loads(r["views"]).items()} if r["views"]
               else read_frames(out / r["video"]))
        for role in (want if isinstance(want, dict) else [None]):
            g, w = (got[role], want[role]) if role else (got, want)
            assert g.shape == w.shape and _psnr(g, w) > 30, (r["clip_id"], role, _psnr(g, w))
        if layout == "grid":
            assert got[:, 24:, 40:].mean() < 1.5  # the empty cell stays black


@pytest.fixture(scope="module")
def droid_av1_root(tmp_path_factory):
    """Two episodes of 3 cameras at DROID's 180x320 in AV1, as LeRobot v3.0 writes them (17 frames: one clip)."""
    return write_demo_dataset(tmp_path_factory.mktemp("droid_av1") / "ds", episodes=2, version="v3.0", height=180,
                              width=320, length=17, codec="libsvtav1", crf=35, preset="12", workers=1)


def test_droid_sized_grid_at_source_size_matches_the_rgb_path(droid_av1_root, tmp_path):
    """3 AV1 cameras of 180x320 into a 180x320 grid: cells of 90x160, whose chroma has 45 rows (an odd
    count, once a crash). Each cell equals the RGB path's (decode to RGB, pack, encode with the same
    settings) above the documented 40 dB; both are encoded losslessly (crf 0), so the figure measures
    the two resize paths and not x264's noise (measured: 43 dB)."""
    assert probe(next(droid_av1_root.glob("videos/*/*/*.mp4"))).codec in ("libdav1d", "av1")
    out = tmp_path / "out"
    rep = prep.run(_cfg(droid_av1_root, out, height=180, width=320, num_frames=5, stride=4, clip_policy="episode",
                        val_fraction=0.0, crf=0), quiet=True)
    assert rep["counts"]["clips"] == 2 and rep["counts"]["dropped_total"] == 0
    info = json.loads((out / "info.json").read_text())
    lay = layout_from_dict(info["layout"])
    assert lay.cell_size() == (90, 160) and i420_exact((180, 320), 90, 160)
    ds = LeRobotDataset(droid_av1_root)
    for r in _manifest(out):
        ep = next(e for e in ds.episodes if e.index == r["episode_index"])
        idx = list(range(r["start_frame"], r["end_frame"], r["stride"]))
        former = tmp_path / f"{r['clip_id']}_rgb.mp4"
        with VideoWriter(former, r["fps"], crf=0, preset="medium", threads=1) as w:
            for frame in lay.pack({role: ds.episode_frames(ep, key, idx) for role, key in info["cameras"].items()}):
                w.write(frame)
        clip = read_frames(out / r["video"])
        assert clip.shape == (5, 180, 320, 3) and clip[:, 90:, 160:].max() <= 2  # the empty cell stays black
        got, want = lay.split(clip), lay.split(read_frames(former))
        assert got.keys() == {"exterior_1", "exterior_2", "wrist"}
        for role in got:
            assert got[role].shape == (5, 90, 160, 3)
            assert _psnr(got[role], want[role]) > 40, (r["clip_id"], role, _psnr(got[role], want[role]))


def test_val_split_is_deterministic_and_stable():
    a = prep.assign_splits(list(range(20)), 0.1, seed=3)
    assert a == prep.assign_splits(list(range(20)), 0.1, seed=3)
    assert sum(v == "val" for v in a.values()) == 2
    b = prep.assign_splits(list(range(20)), 0.1, seed=4)
    assert a != b
    assert set(prep.assign_splits([7], 0.5, 0).values()) == {"train"}  # never hold out everything


def test_bad_inputs_are_skipped_and_counted(v21_copy, tmp_path):
    root = v21_copy
    # episode 0: corrupt wrist video; 1: missing exterior_2 video; 2: fps differs; 4: truncated wrist
    _v21_video(root, WRIST, 0).write_bytes(b"\x00garbage" * 100)
    _v21_video(root, "observation.images.exterior_2_left", 1).unlink()
    p = _v21_video(root, WRIST, 2)
    write_video(p, read_frames(p), fps=30)
    p = _v21_video(root, WRIST, 4)
    write_video(p, read_frames(p)[:8], fps=15)
    with pytest.raises(DatasetError, match="kept 0 clips of 5 episodes .*lower prepare.stride") as e:
        prep.run(_cfg(root, tmp_path / "out"), quiet=True)  # nothing kept: an error, not a silent empty dataset
    assert "\n" not in str(e.value)
    rep = json.loads((tmp_path / "out" / "report.json").read_text())  # the report is still written
    assert rep["counts"]["dropped"] == {"too_short": 1, "missing_camera": 1, "corrupt_video": 1,
                                        "fps_mismatch": 1, "truncated_video": 1}
    assert rep["counts"]["clips"] == 0 and _manifest(tmp_path / "out") == []


def test_frame_count_mismatch_and_zero_length(v21_copy, tmp_path):
    root = v21_copy
    p = _v21_video(root, WRIST, 0)
    fr = read_frames(p)
    write_video(p, np.concatenate([fr, fr[:5]]), fps=15)  # wrist has 5 frames more than the others
    lines = (root / "meta/episodes.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["length"] = 0
    lines[1] = json.dumps(rec)
    (root / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    rep = prep.run(_cfg(root, tmp_path / "out"), quiet=True)
    assert rep["counts"]["dropped"] == {"too_short": 1, "empty_episode": 1, "frame_count_mismatch": 1}


@pytest.mark.parametrize("policy", ["skip", "fallback"])
def test_empty_and_non_utf8_tasks(v21_copy, tmp_path, policy):
    root = v21_copy
    lines = (root / "meta/episodes.jsonl").read_bytes().splitlines()
    lines[0] = b'{"episode_index": 0, "tasks": ["  "], "length": %d}' % LENGTHS[0]
    lines[2] = b'{"episode_index": 2, "tasks": ["\xff\xfe"], "length": %d}' % LENGTHS[2]
    (root / "meta/episodes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out"
    rep = prep.run(_cfg(root, out, missing_task=policy, fallback_task="does something",
                        prompt_template="gr1"), quiet=True)
    if policy == "skip":
        assert rep["counts"]["dropped"] == {"too_short": 1, "missing_task": 2}
    else:
        prompts = {r["episode_index"]: r["prompt"] for r in _manifest(out)}
        assert prompts[0] == prompts[2] == "The robot arm is performing a task. does something."
        assert rep["counts"]["clips"] == 4


def test_one_line_errors(v3_root, tmp_path):
    with pytest.raises(DatasetError, match="is not a dataset"):
        prep.run(_cfg(tmp_path, tmp_path / "out"), quiet=True)
    with pytest.raises(DatasetError, match="no camera feature wrist=observation.images.nope"):
        prep.run(_cfg(v3_root, tmp_path / "o2", cameras={"wrist": "observation.images.nope"}, layout="single",
                      prompt_template="plain"), quiet=True)
    with pytest.raises(ConfigError, match="'droid_grid' describes a 2x2 camera grid but prepare.layout='single'"):
        prep.run(_cfg(v3_root, tmp_path / "o5", cameras={"wrist": WRIST}, layout="single"), quiet=True)
    with pytest.raises(ConfigError, match="neither a preset"):
        prep.run(_cfg(v3_root, tmp_path / "o3", prompt_template="no placeholder"), quiet=True)
    prep.run(_cfg(v3_root, tmp_path / "o4", max_episodes=1), quiet=True)
    with pytest.raises(DatasetError, match="other settings .*num_frames"):
        prep.run(_cfg(v3_root, tmp_path / "o4", num_frames=9, max_episodes=1), quiet=True)


def test_disk_full_is_one_line_and_leaves_no_partial_clip(v3_root, tmp_path, monkeypatch):
    calls = {"n": 0}
    real = VideoWriter._encode

    def flaky(self, frame):
        calls["n"] += 1
        if calls["n"] == 25:  # in the middle of the second clip
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, frame)

    monkeypatch.setattr(VideoWriter, "_encode", flaky)
    out = tmp_path / "out"
    with pytest.raises(DiskFullError, match=r"^disk full while writing .*ep000001_f000000.mp4"):
        prep.run(_cfg(v3_root, out), quiet=True)
    files = sorted(p.name for p in (out / "clips").iterdir())
    assert files == ["ep000000_f000000.mp4"]  # the first clip, complete; no temp file, no second clip
    assert not (out / "manifest.parquet").exists()
    monkeypatch.setattr(VideoWriter, "_encode", real)
    assert prep.run(_cfg(v3_root, out), quiet=True)["counts"]["clips"] == 4  # and it resumes


def test_resume_after_kill_has_no_duplicates(v3_root, tmp_path):
    out = tmp_path / "out"
    cfg = _cfg(v3_root, out, clip_policy="sliding", num_frames=9, stride=1, overlap=0)
    full = prep.run(_cfg(v3_root, tmp_path / "ref", clip_policy="sliding", num_frames=9, overlap=0), quiet=True)
    seen = []

    def kill_after_5(cid):
        seen.append(cid)
        if len(seen) == 5:  # mid-episode: episode 0 has 3 clips, episode 1 has 3
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prep.run(cfg, on_clip=kill_after_5, quiet=True)
    assert len(list((out / ".progress").glob("episode_*.json"))) == 1
    rep = prep.run(cfg, quiet=True)
    rows = _manifest(out)
    ids = [r["clip_id"] for r in rows]
    assert len(ids) == len(set(ids)) == full["counts"]["clips"] == 12
    assert rep["episodes_resumed"] == 1
    assert ids == [r["clip_id"] for r in _manifest(tmp_path / "ref")]
    assert not list((out / "clips").glob(".*"))  # no temp files left


def test_parallel_workers_match_serial(v3_root, tmp_path):
    a = prep.run(_cfg(v3_root, tmp_path / "a", workers=2), quiet=True)
    b = prep.run(_cfg(v3_root, tmp_path / "b", workers=1), quiet=True)
    assert a["counts"] == b["counts"]
    ra, rb = _manifest(tmp_path / "a"), _manifest(tmp_path / "b")
    assert [r["clip_id"] for r in ra] == [r["clip_id"] for r in rb]


def test_plain_dataset_single_layout(tmp_path):
    src = tmp_path / "plain"
    (src / "videos").mkdir(parents=True)
    (src / "metas").mkdir()
    for i in range(3):
        write_video(src / "videos" / f"v{i}.mp4", np.full((12, 24, 40, 3), 40 * i, np.uint8), fps=16)
        (src / "metas" / f"v{i}.txt").write_text("Pick up the cup")
    rep = prep.run(_cfg(src, tmp_path / "out", cameras={"main": "video"}, layout="single", num_frames=9,
                        prompt_template="gr1", height=24, width=40), quiet=True)
    assert rep["counts"]["clips"] == 3
    assert _manifest(tmp_path / "out")[0]["prompt"] == "The robot arm is performing a task. Pick up the cup."


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)")
def test_two_prepare_runs_write_identical_files(tmp_path):
    """The same prepare on a machine with all its CPUs and on one CPU writes the same bytes.

    x264 left to choose its threads cuts each frame into one slice per core, so clips differed
    between machines (and CPU allocations); 240x432 frames are tall enough for it to do so.
    """
    src = tmp_path / "plain"
    (src / "metas").mkdir(parents=True)
    rng = np.random.default_rng(0)
    texture = rng.integers(0, 256, (240, 480, 3), np.uint8)
    for i in range(2):
        write_video(src / "videos" / f"v{i}.mp4", [np.roll(texture, 3 * t + i, axis=1)[:, :432] for t in range(9)], fps=16)
        (src / "metas" / f"v{i}.txt").write_text("Pick up the cup")
    cpus = os.sched_getaffinity(0)
    digests = []
    for run, allowed in enumerate((cpus, {min(cpus)})):
        out = tmp_path / f"out{run}"
        os.sched_setaffinity(0, allowed)
        try:
            prep.run(_cfg(src, out, cameras={"main": "video"}, layout="single", num_frames=9, prompt_template="gr1",
                          height=240, width=432), quiet=True)
        finally:
            os.sched_setaffinity(0, cpus)
        digests.append({p.relative_to(out): hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in sorted((out / "clips").rglob("*.mp4"))})
    assert len(digests[0]) == 2 and digests[0] == digests[1]
