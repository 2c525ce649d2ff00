"""Split a generated grid video into its cameras, by the layout the dataset was prepared with.

The evaluation stage scores each camera on its own (Sampson error within one view, and across
views), and GR00T-Dreams' inverse-dynamics model consumes per-camera videos, so generation
writes both the grid and the views. The dataset stage owns the layout type
(`worldtune.data.layout`); while it is absent we read the grid form of its dict ourselves:
`{"kind": "grid", "rows": R, "cols": C, "cells": {role: [row, col]}}`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from worldtune.errors import GenerationError


def split_views(video: np.ndarray, layout: dict[str, Any] | None) -> dict[str, np.ndarray]:
    """{role: [T,h,w,3]} for a grid layout; {} for no layout or a layout with one view per video."""
    if not layout:
        return {}
    try:
        from worldtune.data.layout import layout_from_dict  # the dataset stage's own reader, when present
    except ImportError:
        layout_from_dict = None
    if layout_from_dict is not None:
        return dict(layout_from_dict(layout).split(video))
    return _split_grid(video, layout)


def _split_grid(video: np.ndarray, layout: dict[str, Any]) -> dict[str, np.ndarray]:
    kind = layout.get("kind") or layout.get("type") or ("grid" if "cells" in layout else None)
    if kind != "grid":
        return {}
    rows, cols, cells = int(layout.get("rows", 2)), int(layout.get("cols", 2)), layout.get("cells") or {}
    _, h, w, _ = video.shape
    if h % rows or w % cols:
        raise GenerationError(f"a {h}x{w} video cannot be split into a {rows}x{cols} grid; generate at a size "
                              f"divisible by the grid")
    th, tw = h // rows, w // cols
    out = {}
    for role, (r, c) in cells.items():
        tile = video[:, r * th:(r + 1) * th, c * tw:(c + 1) * tw]
        out[role] = np.ascontiguousarray(tile)
    return out
