"""A full disk (a small tmpfs, where this test may mount one): one-line errors, nothing half-written, resumable."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.train.conftest import train_cfg
from worldtune.errors import DiskFullError
from worldtune.train.trainer import Trainer

from .conftest import cli, one_line_error
from .test_prepare_faults import PLAIN, _cfg


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of `size` at tmp_path/disk; resize with `small_disk(size)`. Skipped where mount is not allowed."""
    mnt = tmp_path / "disk"
    mnt.mkdir()

    def mount(size: str, remount: bool = False) -> Path:
        opts = f"{'remount,' if remount else ''}size={size}"
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()[:80]})")
        return mnt

    yield mount
    subprocess.run(["umount", str(mnt)], capture_output=True)


def _half_written(root: Path) -> list[Path]:
    """Temp files left behind and 0-byte files under final names."""
    return [p for p in root.rglob("*") if p.is_file() and (".tmp-" in p.name or p.stat().st_size == 0)
            and p.name != ".worldtune.lock"]


def test_prepare_on_a_full_disk_stops_in_one_line_and_resumes(plain30, small_disk, tmp_path):
    from worldtune.data import prepare as prep

    ref = prep.run(_cfg(plain30, tmp_path / "ref"), quiet=True)
    disk = small_disk("160k")
    out = disk / "out"
    p = cli("prepare", "--prepare.source", str(plain30), "--prepare.out", str(out), "--prepare.workers", "2", *PLAIN)
    assert "disk full while writing" in one_line_error(p)
    assert _half_written(out) == []
    small_disk("64m", remount=True)  # space freed
    p = cli("prepare", "--prepare.source", str(plain30), "--prepare.out", str(out), "--prepare.workers", "2", *PLAIN)
    assert p.returncode == 0, p.stderr[-2000:]
    assert pq.read_table(out / "manifest.parquet").to_pylist() == \
        pq.read_table(tmp_path / "ref" / "manifest.parquet").to_pylist()
    assert ref["counts"]["clips"] == 24


def test_train_on_a_full_disk_stops_in_one_line(tiny_model_dir, cached_dataset, small_disk):
    disk = small_disk("24k")
    out = disk / "run"
    with pytest.raises(DiskFullError, match="disk full while writing"):
        Trainer(train_cfg(tiny_model_dir, cached_dataset, out, "--train.steps", "2", "--train.checkpoint.every", "1",
                          "--train.val_every", "0", "--train.val_samples", "0")).fit()
    assert _half_written(out) == []
