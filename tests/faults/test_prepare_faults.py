"""Preparation under kills, failing outputs, damaged sources and a second run into the same folder."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from worldtune.config import PrepareConfig
from worldtune.data import prepare as prep
from worldtune.errors import WorldtuneError

from .conftest import cli_here, env, one_line_error, plain_dataset

PLAIN = ["--prepare.layout", "single", "--prepare.cameras", '{"video": "video"}', "--prepare.height", "32",
         "--prepare.width", "56", "--prepare.num_frames", "17", "--prepare.prompt_template", "plain"]


def _cfg(src, out, **kw) -> PrepareConfig:
    base = dict(source=str(src), out=str(out), layout="single", cameras={"video": "video"}, height=32, width=56,
                num_frames=17, prompt_template="plain", workers=1)
    return PrepareConfig(**{**base, **kw})


def _clips(out: Path) -> dict[str, int]:
    """Final clip files (temp files start with a dot) -> inode."""
    d = out / "clips"
    return {p.name: p.stat().st_ino for p in d.glob("ep*.mp4")} if d.is_dir() else {}


def _kept_records(out: Path) -> set[int]:
    recs = [json.loads(p.read_text()) for p in (out / ".progress").glob("episode_*.json")]
    return {r["episode_index"] for r in recs if not r["dropped"]}


def _popen_prepare(src: Path, out: Path, workers: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "worldtune.cli", "prepare", "--prepare.source", str(src),
                             "--prepare.out", str(out), "--prepare.workers", str(workers), *PLAIN],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env(),
                            start_new_session=True)


def _wait_for_clips(proc: subprocess.Popen, out: Path, n: int, timeout: float = 90, count=_clips) -> int:
    """Wait until `count(out)` (default: the final clips) holds n items or the run ends; returns how many it holds."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        k = len(count(out))
        if k >= n or proc.poll() is not None:
            return k
        time.sleep(0.005)
    raise AssertionError(f"prepare wrote only {len(count(out))} of {n} in {timeout} s")


def _group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    alive = []
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(d.name))
    return alive


def test_kill9_at_90_percent_with_two_workers_keeps_finished_episodes(plain30, tmp_path):
    """The whole process group (main process and workers) is killed as the OOM killer or a preemption would."""
    out = tmp_path / "out"
    ref = prep.run(_cfg(plain30, tmp_path / "ref"), quiet=True)
    jobs = ref["counts"]["episodes_kept"]
    proc = _popen_prepare(plain30, out, workers=2)
    seen = _wait_for_clips(proc, out, int(0.9 * jobs))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert seen < jobs, "the run finished before it could be killed"
    finished = {int(n[2:8]) for n in _clips(out)}
    kept = _kept_records(out)
    assert kept <= finished and len(kept) >= 0.85 * len(finished), (len(kept), len(finished))
    before = _clips(out)

    encoded: list[str] = []
    rep = prep.run(_cfg(plain30, out), on_clip=encoded.append, quiet=True)
    assert rep["episodes_resumed"] == len(kept)
    short = set(ref["dropped_episodes"]["too_short"])
    assert sorted(int(c[2:8]) for c in encoded) == sorted(set(range(30)) - kept - short)  # only the rest
    after = _clips(out)
    assert all(after[n] == before[n] for n in before if int(n[2:8]) in kept)  # not rewritten
    assert pq.read_table(out / "manifest.parquet").to_pylist() == \
        pq.read_table(tmp_path / "ref" / "manifest.parquet").to_pylist()  # as if never interrupted


def test_sigterm_stops_workers_and_keeps_finished_episodes(plain30, tmp_path):
    out = tmp_path / "out"
    proc = _popen_prepare(plain30, out, workers=2)
    # episode records, not clips: a worker's clip is on disk before the main process records its episode, so with
    # two workers 6 clips can stand for 4 recorded episodes
    _wait_for_clips(proc, out, 5, count=_kept_records)
    proc.send_signal(signal.SIGTERM)  # to the main process only, as `kill PID` does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err[-2000:]
    assert "stopped by SIGTERM" in err
    time.sleep(0.5)
    assert _group_alive(proc.pid) == [], "worker processes outlived the stopped run"
    assert len(_kept_records(out)) >= 5


def test_output_write_error_stops_the_run_and_is_not_a_verdict_on_the_source(plain30, tmp_path, monkeypatch):
    real = os.replace

    def failing_rename(a, b):  # an I/O error (or a quota, or a temp file removed by someone else)
        if "ep000002" in str(b):
            raise OSError(errno.EIO, "Input/output error")
        return real(a, b)

    out = tmp_path / "out"
    monkeypatch.setattr(os, "replace", failing_rename)
    with pytest.raises(WorldtuneError, match=r"cannot write .*ep000002"):
        prep.run(_cfg(plain30, out, max_episodes=5), quiet=True)
    monkeypatch.setattr(os, "replace", real)
    rep = prep.run(_cfg(plain30, out, max_episodes=5), quiet=True)
    assert rep["counts"]["dropped"] == {"too_short": 1} and rep["counts"]["clips"] == 4


def test_a_drop_is_retried_when_the_source_file_changed(v21_copy, tmp_path):
    video = v21_copy / "videos" / "chunk-000" / "observation.images.wrist_left" / "episode_000001.mp4"
    good = video.read_bytes()
    video.write_bytes(good[: len(good) // 2])  # an interrupted download
    cfg = PrepareConfig(source=str(v21_copy), out=str(tmp_path / "out"), height=32, width=56, num_frames=17, workers=1)
    rep = prep.run(cfg, quiet=True)
    assert rep["counts"]["clips"] == 2 and sum(rep["counts"]["dropped"].values()) == 1
    assert prep.run(cfg, quiet=True)["counts"]["clips"] == 2  # unchanged file: the verdict holds
    video.write_bytes(good)  # the download is repaired
    rep = prep.run(cfg, quiet=True)
    assert rep["counts"]["clips"] == 3 and rep["counts"]["dropped"] == {}


def test_damage_in_the_middle_of_a_video_is_dropped_not_concealed(tmp_path):
    src = plain_dataset(tmp_path / "ds", 3)
    p = src / "videos" / "ep002.mp4"
    b = bytearray(p.read_bytes())
    mid = len(b) // 2
    b[mid:mid + 64] = bytes(64)  # the header and the file's length are intact
    p.write_bytes(b)
    rep = prep.run(_cfg(src, tmp_path / "out"), quiet=True)
    assert rep["counts"]["dropped"] == {"corrupt_video": 1} and rep["dropped_episodes"]["corrupt_video"] == [2]


def test_only_successful_with_unreadable_success_flags_drops_and_counts(v21_copy, tmp_path):
    (v21_copy / "data" / "chunk-000" / "episode_000001.parquet").write_bytes(b"PAR1 garbage")
    rep = prep.run(PrepareConfig(source=str(v21_copy), out=str(tmp_path / "out"), height=32, width=56,
                                 num_frames=17, workers=1, only_successful=True), quiet=True)
    assert 1 not in {r["episode_index"] for r in pq.read_table(tmp_path / "out" / "manifest.parquet").to_pylist()}
    assert rep["counts"]["dropped"] == {"unknown_success": 1}


def test_codec_or_preset_typo_fails_first_and_does_not_poison_the_folder(plain30, tmp_path):
    out = tmp_path / "out"
    for bad in (["--prepare.preset", "mediun"], ["--prepare.codec", "libx26"]):
        p = cli_here("prepare", "--prepare.source", str(plain30), "--prepare.out", str(out), "--prepare.max_episodes",
                     "2", "--prepare.workers", "1", *PLAIN, *bad)
        assert "cannot encode" in one_line_error(p)
    p = cli_here("prepare", "--prepare.source", str(plain30), "--prepare.out", str(out), "--prepare.max_episodes", "2",
                 "--prepare.workers", "1", *PLAIN)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.parametrize("damage", ["garbage_parquet", "no_episode_index", "fps_text"])
def test_damaged_metadata_is_a_one_line_error(damage, v21_copy, tmp_path):
    meta = v21_copy / "meta"
    if damage == "garbage_parquet":  # a v3 dataset whose episodes parquet is garbage
        info = json.loads((meta / "info.json").read_text())
        info["codebase_version"] = "v3.0"
        (meta / "info.json").write_text(json.dumps(info))
        (meta / "episodes" / "chunk-000").mkdir(parents=True)
        (meta / "episodes" / "chunk-000" / "file-000.parquet").write_bytes(b"not a parquet file")
    elif damage == "no_episode_index":
        lines = (meta / "episodes.jsonl").read_text().splitlines()
        lines[1] = json.dumps({k: v for k, v in json.loads(lines[1]).items() if k != "episode_index"})
        (meta / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    else:
        info = json.loads((meta / "info.json").read_text())
        info["fps"] = "15fps"
        (meta / "info.json").write_text(json.dumps(info))
    p = cli_here("prepare", "--prepare.source", str(v21_copy), "--prepare.out", str(tmp_path / "out"))
    line = one_line_error(p)
    assert str(v21_copy) in line


def test_a_second_run_into_a_live_runs_folder_is_refused(plain30, tmp_path):
    """A run holding the folder (here this test process, as a live prepare does) refuses a second one;
    once it is gone the same command runs. Holding the lock here, not racing a real run, keeps the
    test exact on a loaded machine."""
    from worldtune.lock import OutputLock

    out = tmp_path / "out"
    args = ("prepare", "--prepare.source", str(plain30), "--prepare.out", str(out), "--prepare.workers", "1", *PLAIN)
    with OutputLock(out, "prepare"):
        assert "in use by another worldtune run" in one_line_error(cli_here(*args))
    assert cli_here(*args).returncode == 0
    assert len(pq.read_table(out / "manifest.parquet")) == 24
