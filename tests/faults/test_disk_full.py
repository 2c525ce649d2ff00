"""A full disk (a small tmpfs, where this test may mount one): one-line errors, nothing half-written, resumable."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from tests.train.conftest import train_args, train_cfg
from worldtune import atomic
from worldtune.cli import main
from worldtune.config import load_config
from worldtune.errors import DiskFullError
from worldtune.train.checkpoint import CheckpointManager
from worldtune.train.trainer import Trainer

from .conftest import RUN3, cli, one_line_error, same_checkpoint
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
    subprocess.run(["umount", "--lazy", str(mnt)], capture_output=True)  # even while a failed test's tensors map it


def _half_written(root: Path) -> list[Path]:
    """Temp files left behind and 0-byte files under final names."""
    return [p for p in root.rglob("*") if p.is_file() and (".tmp-" in p.name or p.stat().st_size == 0)
            and p.name != ".worldtune.lock"]


@pytest.mark.slow  # ~20 s on 2 cores: prepare filling a small disk, then resuming
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


def _fill(disk: Path) -> None:
    """Take every free byte of the tmpfs at `disk` (a file `filler`; delete it to free the space)."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 1 << 12):
            block = bytes(size)
            while True:
                try:
                    os.write(fd, block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)


def _disk_fills_at(part: str, disk: Path, monkeypatch) -> None:
    """The disk fills up just as a checkpoint's `part` starts to be written, whoever writes it: the atomic
    layer (its temp name), torch.save or safetensors' save_file."""
    def at(dest) -> None:
        d = Path(dest if isinstance(dest, (str, os.PathLike)) else dest.name)  # a path, or a file object's name
        if ".tmp-step-" in d.parent.name and d.name.lstrip(".").startswith(part):
            _fill(disk)

    def wrap(owner, name: str, dest_arg: int) -> None:
        real = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, **k: (at(a[dest_arg]), real(*a, **k))[1])

    import safetensors.torch

    wrap(atomic, "temp_path", 0)
    wrap(torch, "save", 1)
    wrap(safetensors.torch, "save_file", 1)


CHECKPOINT_PARTS = ("trainable.safetensors", "optimizer.pt", "rng.pt", "state.json", "COMPLETE")


def test_full_disk_in_each_checkpoint_part_is_one_line_and_resume_is_exact(tiny_model_dir, cached_dataset, run3,
                                                                          small_disk, monkeypatch, capsys):
    disk = small_disk("64m")
    out = disk / "run"
    ckpts = out / "checkpoints"
    step1 = run3 / "checkpoints" / "step-00000001"
    shutil.copytree(step1, ckpts / step1.name)  # a run stopped after step 1's checkpoint
    args = train_args(tiny_model_dir, cached_dataset, out, *RUN3, "--train.resume", "auto")

    def failed_cleanly_then_free(part: str, message: str) -> None:
        assert "\n" not in message and f"in {ckpts}: it needs about" in message, (part, message)
        assert [p.name for p in ckpts.iterdir()] == [step1.name], part  # no temp folder, no step 2
        assert same_checkpoint(ckpts / step1.name, step1), part  # the previous checkpoint is intact
        (disk / "filler").unlink()  # space freed

    # as a user runs it: one `error:` line, exit 1 (no traceback: anything but our errors would escape `main`)
    with monkeypatch.context() as m:
        _disk_fills_at(CHECKPOINT_PARTS[0], disk, m)
        assert main(["train", *args]) == 1
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "Traceback" not in err and line.startswith("error: disk full while writing the checkpoint of step 2"), err
    failed_cleanly_then_free(CHECKPOINT_PARTS[0], line)
    trainer = Trainer(load_config(None, args))  # the same run, built once for the other parts
    for part in CHECKPOINT_PARTS[1:]:
        with monkeypatch.context() as m:
            _disk_fills_at(part, disk, m)
            with pytest.raises(DiskFullError) as e:
                trainer.fit()
        failed_cleanly_then_free(part, str(e.value))
    Trainer(load_config(None, args)).fit()  # the rerun after space was freed
    for name in ("step-00000002", "step-00000003"):
        assert same_checkpoint(ckpts / name, run3 / "checkpoints" / name), name


def test_full_disk_while_writing_ema_weights_keeps_the_previous_checkpoint(small_disk, monkeypatch):
    disk = small_disk("8m")
    manager = CheckpointManager(disk / "run")
    w = {"w": torch.arange(4.0)}
    opt = {"state": {0: {"exp_avg": torch.ones(4), "exp_avg_sq": torch.ones(4), "step": torch.tensor(1.0)}},
           "param_groups": []}
    first = manager.save(1, w, opt, {}, ema=w)
    _disk_fills_at("ema.safetensors", disk, monkeypatch)
    with pytest.raises(DiskFullError, match=f"in {manager.dir}: it needs about") as e:
        manager.save(2, {"w": w["w"] + 1}, opt, {}, ema=w)
    assert "\n" not in str(e.value)
    assert [p.name for p in manager.dir.iterdir()] == [first.name] and _holds(first, w["w"])


def _holds(checkpoint: Path, w: torch.Tensor) -> bool:
    """Whether `checkpoint` holds `w` as weights and EMA (loaded here: its memory-mapped tensors must not outlive
    the call, or the tmpfs stays busy and cannot be unmounted)."""
    kept = CheckpointManager.load(checkpoint)
    return torch.equal(kept["trainable"]["w"], w) and torch.equal(kept["ema"]["w"], w)
