"""Latent cache of a separate-views dataset, and read access to it for the multi-view model.

`worldtune prepare` with `layout = "separate"` writes one mp4 per camera and clip
(`clips/<clip_id>/<role>.mp4`; the manifest's `views` column is JSON role -> relative path) and
no packed `video`. This module encodes every view with the VAE into the ordinary cache format of
`worldtune.data.cache` (same folder, key, info.json and text shards), storing each view's latents
under the key `<clip_id>/<role>`. The trainer finds the folder exactly as for a packed dataset;
`MultiViewCachedClips` then hands it clips whose latents are the views stacked along time
[C, V·T, H/8, W/8] (`worldtune.models.multiview.stack_views`), in the dataset layout's role order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from worldtune.errors import DatasetError

if TYPE_CHECKING:  # the reader is handed a cache
    from worldtune.data.latent_cache import LatentCache


def view_key(clip_id: str, role: str) -> str:
    """Cache key of one view's latents."""
    return f"{clip_id}/{role}"


def dataset_roles(info: dict[str, Any], root: str | Path = "dataset") -> list[str]:
    """The camera roles of a separate-views dataset, in the order the views are stacked."""
    layout = info.get("layout") or {}
    if layout.get("type") != "separate":
        raise DatasetError(f"{root}/info.json: layout is {layout.get('type')!r}, the multi-view model needs a dataset "
                           f"prepared with prepare.layout = \"separate\"")
    return list(layout["roles"])


def view_paths(row: dict[str, Any]) -> dict[str, str]:
    """role -> relative mp4 path of one manifest row."""
    if not row.get("views"):
        raise DatasetError(f"clip {row.get('clip_id')} has no per-view videos (manifest column `views`): "
                           f"prepare the dataset with prepare.layout = \"separate\"")
    return json.loads(row["views"])


def read_view_frames(root: str | Path, row: dict[str, Any], roles: list[str]) -> dict[str, np.ndarray]:
    """{role: frames [T, H, W, 3]} of one clip; a missing view is a DatasetError naming it."""
    from worldtune.data.video import read_frames

    paths = view_paths(row)
    missing = [r for r in roles if r not in paths]
    if missing:
        raise DatasetError(f"clip {row['clip_id']} lacks views {missing} (it has {sorted(paths)})")
    return {r: read_frames(Path(root) / paths[r]) for r in roles}


def encode_views(vae, frames: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """{role: frames} -> {role: normalised latents [C, T', H/8, W/8]} (one VAE call for all views)."""
    from worldtune.models.latents import encode, frames_to_pixels

    roles = list(frames)
    lat = encode(vae, torch.stack([frames_to_pixels(frames[r]) for r in roles]))
    return dict(zip(roles, lat))


class MultiViewCachedClips:
    """Clips of one split with every view cached; items are {"latents": [C, V·T, h, w], "text", ...}.

    A drop-in for `worldtune.data.dataset.CachedClips` when training the multi-view model.
    """

    def __init__(self, rows: list[dict[str, Any]], cache: LatentCache, roles: list[str], split: str = "train"):
        self.cache, self.roles = cache, list(roles)
        have = cache.clip_ids
        self.rows = [r for r in rows if r.get("split", "train") == split
                     and all(view_key(r["clip_id"], role) in have for role in self.roles)]

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def num_views(self) -> int:
        return len(self.roles)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from worldtune.models.multiview import stack_views

        row = self.rows[i]
        views = {r: self.cache.latents(view_key(row["clip_id"], r)).float() for r in self.roles}
        return {"latents": stack_views(views, self.roles), "text": self.cache.text(row["prompt"]).float(),
                "clip_id": row["clip_id"], "prompt": row["prompt"]}
