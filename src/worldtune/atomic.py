"""Atomic writes for the files worldtune writes: a reader sees the old file or the whole new one.

Why: every stage resumes by trusting what is on disk ("the file exists" means "the file is
complete"), so a kill -9, an OOM kill or a full disk must never leave a half-written or 0-byte
file under its final name. A whole file is written to a temp file in the same folder, fsynced and
renamed over the final name (`os.replace` is atomic within one file system). An append-only log
(JSONL) gets one whole line per `write`, fsynced; a line torn by a kill is cut off by the next
append and skipped by `read_jsonl`. A library that writes a file itself (torch.save, safetensors) writes it
through `atomic_dump` (into our file object) or `atomic_dump_path` (to a temp name), never to the final name.

A write that fails (disk full, quota, I/O error, permissions) raises `OutputError` naming the
file (`DiskFullError` for ENOSPC), never a traceback, and the temp file is removed: a failing
output side is a reason to stop and rerun, never a verdict on an input. Libraries report the same failure in
their own error types; `os_error_in` finds the operating system's error behind them.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

from worldtune.errors import DiskFullError, OutputError

TMP_MARK = ".tmp-"  # temp files are named .<name>.tmp-<pid>-<random>: stale ones are safe to delete


def output_error(e: OSError, path: str | Path) -> OutputError:
    """The one-line error for a failed write of `path`."""
    p = Path(path)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "disk full" if e.errno == errno.ENOSPC else "disk quota exceeded"
        return DiskFullError(f"{what} while writing {p}: free space in {p.parent} and rerun (the run resumes)", what)
    reason = e.strerror or (str(e).splitlines()[0][:160] if str(e) else type(e).__name__)
    return OutputError(f"cannot write {p}: {reason}; fix the output folder and rerun (the run resumes)")


def os_error_in(e: BaseException) -> OSError | None:
    """The operating system's error behind a library's own error type, or None when there is none.

    Why: a full disk must read the same whoever hit it. torch.save into a file object raises RuntimeError
    ("enforce fail ... unexpected pos") with the file's OSError as its context; safetensors (Rust) raises
    SafetensorError whose text ends in "(os error 28)". Only for errors of one library call writing one file:
    elsewhere an unrelated OSError in the context chain would be misread as the cause.
    """
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    code = re.search(r"\(os error (\d+)\)", str(e))
    return OSError(int(code.group(1)), os.strerror(int(code.group(1)))) if code else None


def temp_path(path: str | Path) -> Path:
    """A unique temp name beside `path` (same folder, so the final rename is atomic)."""
    p = Path(path)
    return p.with_name(f".{p.name}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def remove_stale_temps(folder: str | Path, recursive: bool = False) -> int:
    """Delete temp files left by killed writers under `folder`; returns how many.

    Only safe while no other process writes there (hold the folder's `OutputLock`)."""
    root = Path(folder)
    if not root.is_dir():
        return 0
    n = 0
    for p in (root.rglob if recursive else root.glob)(f".*{TMP_MARK}*"):
        try:
            p.unlink()
            n += 1
        except OSError:
            pass
    return n


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8",
                newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temp file for writing; on a clean exit it is fsynced and renamed to `path`.

    An exception inside the block (or a failed write) removes the temp file and leaves `path`
    untouched. Use this for streamed writers (csv, a figure, a library's `save(file)`).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files (mode 'w' or 'wb'), not {mode!r}")
    p = Path(path)
    tmp = temp_path(p)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        binary = mode == "wb"
        with open(tmp, "xb" if binary else "x", encoding=None if binary else encoding,
                  newline=None if binary else newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as e:
        _unlink(tmp)
        raise output_error(e, p) from None
    except BaseException:
        _unlink(tmp)
        raise


def atomic_dump(path: str | Path, dump: Callable[[IO[bytes]], Any]) -> Path:
    """Write `path` atomically with a library's writer that takes a file object, e.g. `torch.save(obj, f)`.

    Why not give the library the path: torch.save(obj, path) writes from C++ and reports a full disk as an
    errno-less RuntimeError, and it writes under the final name. Written into our temp file, a failed write keeps
    its OSError and becomes the one-line `OutputError` / `DiskFullError`.
    """
    with atomic_open(path, "wb") as f:
        try:
            dump(f)
        except Exception as e:
            cause = os_error_in(e)
            if cause is None:
                raise
            raise cause from None  # atomic_open removes the temp file and names `path`
    return Path(path)


def atomic_dump_path(path: str | Path, dump: Callable[[str], Any]) -> Path:
    """Write `path` atomically with a library's writer that takes only a file name (safetensors' `save_file`):
    the writer writes a temp name beside `path`, which is fsynced and renamed. A failed write, in whatever error
    type the library reports it, is the one-line `OutputError` / `DiskFullError`, and the temp file is removed."""
    p = Path(path)
    tmp = temp_path(p)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        dump(str(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except Exception as e:
        _unlink(tmp)
        cause = os_error_in(e)
        if cause is None:
            raise
        raise output_error(cause, p) from None
    except BaseException:
        _unlink(tmp)
        raise
    return p


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 `text` to `path` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 1, **dumps: Any) -> Path:
    """Write `obj` as JSON (with a final newline) atomically; `dumps` goes to `json.dumps`."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, **dumps) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[Any], **dumps: Any) -> Path:
    """Write one JSON document per line atomically (a whole log rewritten at once)."""
    return atomic_write_text(path, "".join(json.dumps(r, **dumps) + "\n" for r in rows))


def atomic_write_csv(path: str | Path, rows: Iterable[dict[str, Any]], fieldnames: Sequence[str]) -> Path:
    """Write dict rows as CSV with a header, atomically (columns missing from a row are empty)."""
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(fieldnames), extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def append_jsonl(path: str | Path, record: Any, **dumps: Any) -> None:
    """Append one record as one line, fsynced: a kill loses at most this record, never an earlier one.

    If the file ends in a line torn by an earlier kill, that fragment is cut off first, so the new
    line never glues onto it.
    """
    p = Path(path)
    line = (json.dumps(record, **dumps) + "\n").encode("utf-8")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "ab+") as f:
            _cut_torn_tail(f)
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise output_error(e, p) from None


def _cut_torn_tail(f: IO[bytes]) -> None:
    end = f.seek(0, os.SEEK_END)
    if end == 0:
        return
    f.seek(end - 1)
    if f.read(1) == b"\n":
        return
    block = 1 << 16
    pos = end
    while pos > 0:  # find the last newline; everything after it is the torn line
        start = max(0, pos - block)
        f.seek(start)
        chunk = f.read(pos - start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            f.truncate(start + i + 1)
            return
        pos = start
    f.truncate(0)


def read_jsonl(path: str | Path) -> list[Any]:
    """The complete records of a JSONL file; a torn or garbled line (a killed writer) is skipped."""
    p = Path(path)
    if not p.is_file():
        return []
    out = []
    for line in p.read_bytes().splitlines():
        try:
            out.append(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
    return out


def rewrite_jsonl(path: str | Path, keep: Callable[[Any], bool], **dumps: Any) -> int:
    """Atomically drop the records for which `keep` is false (e.g. log rows past a resumed step)."""
    rows = read_jsonl(path)
    kept = [r for r in rows if keep(r)]
    if len(kept) != len(rows) or _has_torn_tail(path):
        atomic_write_jsonl(path, kept, **dumps)
    return len(rows) - len(kept)


def _has_torn_tail(path: str | Path) -> bool:
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return False
    with open(p, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def _unlink(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass
