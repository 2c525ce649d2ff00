import errno
import json

import pytest

from worldtune import atomic
from worldtune.errors import DiskFullError, OutputError


def test_whole_file_writers_leave_no_temp(tmp_path):
    atomic.atomic_write_json(tmp_path / "a" / "x.json", {"a": 1})
    atomic.atomic_write_jsonl(tmp_path / "x.jsonl", [{"i": 0}, {"i": 1}])
    atomic.atomic_write_csv(tmp_path / "x.csv", [{"a": 1, "b": 2}, {"a": 3}], ["a", "b"])
    assert json.loads((tmp_path / "a" / "x.json").read_text()) == {"a": 1}
    assert atomic.read_jsonl(tmp_path / "x.jsonl") == [{"i": 0}, {"i": 1}]
    assert (tmp_path / "x.csv").read_text().splitlines() == ["a,b", "1,2", "3,"]
    assert not list(tmp_path.rglob(f"*{atomic.TMP_MARK}*"))


def test_failed_block_keeps_old_file(tmp_path):
    p = tmp_path / "x.txt"
    atomic.atomic_write_text(p, "old")
    with pytest.raises(RuntimeError):
        with atomic.atomic_open(p) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert p.read_text() == "old" and [q.name for q in tmp_path.iterdir()] == ["x.txt"]


@pytest.mark.parametrize("code,cls", [(errno.ENOSPC, DiskFullError), (errno.EIO, OutputError)])
def test_write_errors_are_one_line_output_errors(tmp_path, monkeypatch, code, cls):
    def boom(*a, **k):
        raise OSError(code, "injected")

    monkeypatch.setattr(atomic.os, "fsync", boom)
    with pytest.raises(cls) as e:
        atomic.atomic_write_json(tmp_path / "x.json", {})
    assert "x.json" in str(e.value) and "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_append_cuts_a_torn_line_and_rewrite_filters(tmp_path):
    p = tmp_path / "m.jsonl"
    atomic.append_jsonl(p, {"step": 1})
    with open(p, "ab") as f:
        f.write(b'{"step": 2, "lo')  # a writer killed mid-line
    assert atomic.read_jsonl(p) == [{"step": 1}]
    atomic.append_jsonl(p, {"step": 2})
    assert p.read_text() == '{"step": 1}\n{"step": 2}\n'
    assert atomic.rewrite_jsonl(p, lambda r: r["step"] <= 1) == 1
    assert atomic.read_jsonl(p) == [{"step": 1}]


def test_remove_stale_temps(tmp_path):
    (tmp_path / "sub").mkdir()
    stale = atomic.temp_path(tmp_path / "sub" / "clip.mp4")
    stale.write_bytes(b"x")
    (tmp_path / "keep.mp4").write_bytes(b"x")
    assert atomic.remove_stale_temps(tmp_path, recursive=True) == 1
    assert not stale.exists() and (tmp_path / "keep.mp4").exists()


class _FullAfter:
    """A file object whose disk fills up after `room` bytes, as the real one of a full disk does."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def test_torch_save_on_a_full_disk_is_a_one_line_error_and_keeps_the_old_file(tmp_path):
    import torch

    p = tmp_path / "optimizer.pt"
    atomic.atomic_dump(p, lambda f: torch.save({"x": torch.zeros(4)}, f))
    with pytest.raises(DiskFullError, match="disk full while writing .*optimizer.pt") as e:
        atomic.atomic_dump(p, lambda f: torch.save({"x": torch.ones(10_000)}, _FullAfter(f, 1000)))
    assert "\n" not in str(e.value)  # torch's own "enforce fail ... unexpected pos" is not what the user sees
    assert [q.name for q in tmp_path.iterdir()] == ["optimizer.pt"]
    assert torch.equal(torch.load(p, weights_only=True)["x"], torch.zeros(4))


def test_path_writers_map_their_library_errors_and_leave_no_temp(tmp_path):
    class SafetensorError(Exception):  # how safetensors (Rust) reports a failed write
        pass

    def full(name: str) -> None:
        with open(name, "wb") as f:
            f.write(b"half")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(DiskFullError, match="weights.safetensors"):
        atomic.atomic_dump_path(tmp_path / "weights.safetensors", full)
    assert list(tmp_path.iterdir()) == []

    def bug(name: str) -> None:
        raise ValueError("not a write error")

    with pytest.raises(ValueError):  # a bug keeps its own error (and traceback)
        atomic.atomic_dump_path(tmp_path / "weights.safetensors", bug)
    assert list(tmp_path.iterdir()) == []
