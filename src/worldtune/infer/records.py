"""The generations folder: info.json, per-process row logs, and the merged generations.jsonl.

Format (version 1), read by the evaluation stage:

    <out>/info.json            {"format": "worldtune.generations", "version": 1, "layout": {...}|null, "fps": ...}
    <out>/generations.jsonl    one row per output video (all processes merged)
    <out>/generations.rank<k>.jsonl   rows process k wrote (appended one line per finished video)
    <out>/<model>/<name>_s<seed>.mp4 (+ <name>_s<seed>/<role>.mp4 views for grid layouts)
    <out>/ground_truth/<name>.mp4    (+ <name>/<role>.mp4)

A row is appended only after its video is on disk (written atomically), so "row present and file
exists" means complete. Each process appends to its own file (no locking across hosts on a shared
filesystem); every process, when done, marks itself done and merges if all are: merging is
idempotent (rows keyed by model, name, seed; the newest wins), so whoever finishes last leaves a
complete generations.jsonl.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from worldtune.atomic import append_jsonl, atomic_write_json, atomic_write_jsonl, atomic_write_text
from worldtune.errors import GenerationError

FORMAT = "worldtune.generations"
VERSION = 1
MERGED = "generations.jsonl"


def row_key(row: dict[str, Any]) -> tuple[str, str, int]:
    return str(row["model"]), str(row["name"]), int(row["seed"])


def rank_file(out: Path, rank: int) -> Path:
    return out / f"generations.rank{rank}.jsonl"


def _done_marker(out: Path, rank: int) -> Path:
    return out / f".rank{rank}.done"


def write_info(out: Path, layout: dict[str, Any] | None, fps: float, dataset: str | None = None) -> None:
    """Create or check info.json: a folder holds one format version and one fps.

    `dataset`: the prepared dataset the inputs came from, so evaluation finds its cameras.
    """

    path = out / "info.json"
    info = {"format": FORMAT, "version": VERSION, "layout": layout, "fps": fps, "dataset": dataset}
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            old = {}
        if old.get("format") != FORMAT:
            raise GenerationError(f"{path}: {out} is not a generations folder; choose another generate.out")
        if old.get("version") != VERSION:
            raise GenerationError(f"{path}: version {old.get('version')} folder, this worldtune writes {VERSION}")
        if old.get("fps") != fps or old.get("layout") != layout:
            raise GenerationError(f"{path}: folder was written with fps={old.get('fps')} layout={old.get('layout')}; "
                                  f"write fps={fps} layout={layout} into another generate.out")
        return
    atomic_write_json(path, info)


def read_rows(paths: Iterable[Path]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Rows from jsonl files in order, keyed; a later row replaces an earlier one. Torn lines are dropped."""
    rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    for p in paths:
        if not p.is_file():
            continue
        for line in p.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                rows[row_key(row)] = row
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a line cut by a crash: that output is simply redone
    return rows


def all_rows(out: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    """What is recorded so far: the merged file, then every process's own file (newer)."""
    return read_rows([out / MERGED, *sorted(out.glob("generations.rank*.jsonl"))])


def is_complete(out: Path, row: dict[str, Any] | None, params_hash: str) -> bool:
    """Resume test: a row with the same parameters exists and every file it names is on disk."""
    if row is None or row.get("params_hash") != params_hash:
        return False
    files = [row.get("video"), *(row.get("views") or {}).values()]
    return all(f and (out / f).is_file() for f in files)


def append_row(out: Path, rank: int, row: dict[str, Any]) -> None:
    """One line, flushed and fsynced, so a crash loses at most the video being written."""
    append_jsonl(rank_file(out, rank), row, sort_keys=True)


def merge(out: Path) -> int:
    """Write generations.jsonl from everything recorded (atomic); returns the number of rows."""
    rows = all_rows(out)
    atomic_write_jsonl(out / MERGED, (r for _, r in sorted(rows.items())), sort_keys=True)
    return len(rows)


def start_rank(out: Path, rank: int) -> None:
    _done_marker(out, rank).unlink(missing_ok=True)


def finish_rank(out: Path, rank: int, world_size: int) -> bool:
    """Mark this process done; merge if every process is. True if this call merged."""
    atomic_write_text(_done_marker(out, rank), "done\n")
    if all(_done_marker(out, r).is_file() for r in range(world_size)):
        merge(out)
        return True
    return False
