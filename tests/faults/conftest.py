"""Fixtures of the fault-injection suite: small datasets made fast, and a way to run the CLI as a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import worldtune
from worldtune.data.synthetic import write_demo_dataset
from worldtune.data.video import write_video

SRC = Path(worldtune.__file__).resolve().parents[1]  # subprocesses run the same code as the tests


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def plain_dataset(root: Path, episodes: int, seed: int = 0) -> Path:
    """A plain dataset (videos/*.mp4 + metas/*.txt) of textured moving noise: quick to write, real to encode.

    Episodes have 20-40 frames, except every fifth one (3, 8, ...): 10 frames, too short for a
    17-frame clip."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (48, 240, 3), dtype=np.uint8)
    for e in range(episodes):
        shift = int(rng.integers(0, 80))
        n = 10 if e % 5 == 3 else int(rng.integers(20, 41))
        fr = np.stack([base[:, shift + i: shift + i + 80] for i in range(n)])
        write_video(root / "videos" / f"ep{e:03d}.mp4", fr, fps=15, preset="ultrafast")
        (root / "metas").mkdir(parents=True, exist_ok=True)
        (root / "metas" / f"ep{e:03d}.txt").write_text(f"moves the block {e}")
    return root


@pytest.fixture(scope="session")
def plain30(tmp_path_factory) -> Path:
    return plain_dataset(tmp_path_factory.mktemp("plain30") / "ds", 30)


@pytest.fixture(scope="session")
def v21(tmp_path_factory) -> Path:
    return write_demo_dataset(tmp_path_factory.mktemp("v21") / "ds", episodes=3, version="v2.1", height=48, width=80,
                              failed=(1,), workers=1)


@pytest.fixture
def v21_copy(v21, tmp_path) -> Path:
    return Path(shutil.copytree(v21, tmp_path / "v21"))


def cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """`worldtune <args>` in a fresh process, with this checkout first on the path."""
    return subprocess.run([sys.executable, "-m", "worldtune.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env(), **kw)


def one_line_error(p: subprocess.CompletedProcess) -> str:
    """The CLI failed with exit 1 and a single `error:` line, no traceback."""
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, p.stderr[-2000:]
    return lines[0]


from tests.infer.conftest import adapter_dir, tiny_pipe  # noqa: E402,F401  (shared fixtures)
