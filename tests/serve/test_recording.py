"""Recording under failure: a killed write leaves only a `.partial` folder (deleted at the next start) and every
finished episode whole; `worldtune serve` stopped by SIGTERM records the rollout it was running."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from worldtune.data.lerobot import LeRobotDataset
from worldtune.errors import OutputError
from worldtune.serve.recorder import EpisodeRecorder, Recording, clean_partials

SIZES = {"wrist": (16, 24)}
KEYS = {"wrist": "observation.images.wrist"}


def _recorder(folder: Path) -> EpisodeRecorder:
    return EpisodeRecorder(folder, 15, KEYS, SIZES, ["a0", "a1"])


def _episode(rec: EpisodeRecorder, chunks: int) -> Recording:
    rng = np.random.default_rng(chunks)
    recording = rec.start({"wrist": rng.integers(0, 255, (1, 16, 24, 3), dtype=np.uint8)}, "task", {"source/seed": 0})
    for _ in range(chunks):
        recording.add({"wrist": rng.integers(0, 255, (4, 16, 24, 3), dtype=np.uint8)}, rng.normal(size=(4, 2)))
    return recording


def test_a_failed_write_leaves_finished_episodes_whole(tmp_path, monkeypatch):
    from worldtune.data import lerobot_writer

    rec = _recorder(tmp_path)
    first = rec.write(_episode(rec, 2))[0]
    assert first.name == "episode_000000"
    second = _episode(rec, 1)
    monkeypatch.setattr(lerobot_writer.LeRobotWriter, "finish", lambda self: (_ for _ in ()).throw(OSError("disk")))
    with pytest.raises(OutputError, match="disk"):
        rec.write(second)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episode_000000"]
    (tmp_path / ".episode_000001.partial" / "meta").mkdir(parents=True)  # what a kill -9 mid-write leaves
    clean_partials(tmp_path)  # what a server's start does
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episode_000000"]
    ds = LeRobotDataset(first)
    assert len(ds) == 1 and ds.episodes[0].length == 9
    assert rec.write(second)[0].name == "episode_000001"  # the failed recording, written again whole
    assert LeRobotDataset(tmp_path / "episode_000001").episodes[0].length == 5
    assert rec.write(_episode(rec, 0)) is None  # a rollout without a step has nothing to record


def test_sigterm_records_the_running_rollout(tiny_cosmos3_dir, tmp_path):
    """The CLI: `worldtune serve` on a free port, one chunk through the Client, then SIGTERM."""
    from worldtune.serve import Client

    record = tmp_path / "episodes"
    cmd = [sys.executable, "-m", "worldtune.cli", "serve", "--model.path", str(tiny_cosmos3_dir), "--serve.port", "0",
           "--serve.steps", "1", "--serve.guidance", "1", "--serve.tier", "256", "--serve.device", "cpu",
           "--serve.record", str(record)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        url = None
        for line in proc.stdout:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url and url.startswith("http://127.0.0.1:"), "the server did not start"
        client = Client(url)
        obs = client.reset(np.full((64, 112, 3), 90, np.uint8), "push the block", seed=0)
        assert obs["image"].shape == (64, 112, 3)
        assert client.step(np.zeros((4, 10), np.float32))["image"].shape == (4, 64, 112, 3)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "recorded the running rollout" in out
    ds = LeRobotDataset(record / "episode_000000")
    assert ds.episodes[0].length == 5 and ds.episodes[0].task == "push the block"
