"""Split a generated video into its cameras, by the layout the dataset was prepared with.

The evaluation stage scores each camera on its own (Sampson error within one view, and across
views), and GR00T-Dreams' inverse-dynamics model consumes per-camera videos, so generation
writes both the packed video and the views. The layout object is the dataset stage's
(`worldtune.data.layout`): the same object that packed the cameras splits them again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from worldtune.names import safe_name


def split_views(video: np.ndarray, layout: dict[str, Any] | None) -> dict[str, np.ndarray]:
    """{role: [T,h,w,3]} for a multi-camera layout; {} without a layout or for a single camera.

    Roles come from a dataset's info.json: they are made safe file names here (`names.safe_name`)."""
    if not layout or layout.get("type") == "single":
        return {}
    from worldtune.data.layout import layout_from_dict

    return {safe_name(role): np.ascontiguousarray(v) for role, v in layout_from_dict(layout).split(video).items()}


def layout_roles(layout: dict[str, Any] | None) -> list[str]:
    """The camera roles split_views returns for this layout."""
    if not layout or layout.get("type") == "single":
        return []
    from worldtune.data.layout import layout_from_dict

    return [safe_name(role) for role in layout_from_dict(layout).roles]
