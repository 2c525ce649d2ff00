"""The one rule for names read from files: `safe_name` for a name that becomes a path component, `inside` for a
relative path that is read.

Why: input names (a JSONL `name`, a dataset's clip ids and camera keys, camera roles from a crafted info.json or
idm.json, adapter names, a request's labels) become output paths, and relative paths in a JSONL or an info.json
are opened; unchecked, `../x` or `/etc/x` would write or read outside the folder they belong to. A safe name is
one path component: letters, digits and `-_.=` only (anything else becomes `_`), no leading dot (no hidden files,
no `..`), at most 120 characters, never empty. A read path is confined to its folder by its name (no absolute
path, no `..` above the folder); links inside the folder, made by the user or their tools, are followed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping, TypeVar

from worldtune.errors import DatasetError

_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]")
MAX_LEN = 120
K = TypeVar("K")


def safe_name(text: object, fallback: str = "item") -> str:
    """`text` as a single, harmless file-name component (idempotent: a safe name maps to itself)."""
    name = _UNSAFE.sub("_", str(text)).lstrip(".")[:MAX_LEN].rstrip(".")
    return name or fallback


def safe_names(names: Mapping[K, object], where: str) -> dict[K, str]:
    """Every value of `names` made safe; two that become the same name would share files, so that is refused
    in one line naming `where` (the file or setting they came from)."""
    out = {k: safe_name(v) for k, v in names.items()}
    seen: dict[str, K] = {}
    for k, v in out.items():
        if v in seen:
            raise DatasetError(f"{where}: {names[seen[v]]!r} and {names[k]!r} both become the file name {v!r}: "
                               "give them names that differ in letters, digits or -_.=")
        seen[v] = k
    return out


def inside(root: str | Path, relative: object, where: str) -> Path:
    """`root / relative` when the name stays inside `root`; a one-line DatasetError naming `where` (the file and field
    the path came from) otherwise.

    The name is judged as written, not where links lead: an absolute name, or one whose `..` climbs above `root`, is
    refused, and the `..` of a name that stays inside are folded away before the path is used (so `link/..` never
    means the link target's parent). Symbolic links in the folder are the user's (a Hugging Face hub cache snapshot
    links every file into the repo's blobs/; a lab links in a shared drive) and are followed wherever they go."""
    text = str(relative) if isinstance(relative, (str, Path)) else None
    if not text or "\0" in text or Path(text).is_absolute():
        raise DatasetError(f"{where}: {shown(relative)} is not a relative path inside {root}: the file is damaged or "
                           "was edited; regenerate it")
    folded = os.path.normpath(text)
    if folded == ".." or folded.startswith(".." + os.sep):
        raise DatasetError(f"{where}: {shown(relative)} points outside {root} (its '..' climbs out): only files "
                           "inside it are read; regenerate the file")
    return Path(root) / folded


def shown(value: object, limit: int = 60) -> str:
    """A value as an error message quotes it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
