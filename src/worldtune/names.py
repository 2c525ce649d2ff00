"""`safe_name`: the one place where a name from user data becomes a file-name component.

Why: input names (a JSONL `name`, a dataset's clip ids, camera roles from a crafted info.json,
adapter names) become output paths; unchecked, `../x` or `/etc/x` would write outside the output
folder. A safe name is one path component: letters, digits and `-_.=` only (anything else becomes
`_`), no leading dot (no hidden files, no `..`), at most 120 characters, never empty.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]")
MAX_LEN = 120


def safe_name(text: object, fallback: str = "item") -> str:
    """`text` as a single, harmless file-name component (idempotent: a safe name maps to itself)."""
    name = _UNSAFE.sub("_", str(text)).lstrip(".")[:MAX_LEN].rstrip(".")
    return name or fallback
