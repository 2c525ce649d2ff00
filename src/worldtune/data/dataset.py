"""Training data from a prepared dataset folder: cached latents, or decoded clips.

The sampler is ours rather than a DataLoader's shuffle so that its position is two integers
(epoch, cursor) that a checkpoint stores, and so that the global batch is the same sequence of
clips whatever the number of processes: process r of W takes slice r of each global batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldtune.errors import DatasetError


def read_dataset(root: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """info.json and the manifest rows of a prepared dataset, or a one-line error."""
    import pyarrow.parquet as pq

    root = Path(root)
    info_path, man_path = root / "info.json", root / "manifest.parquet"
    if not info_path.is_file() or not man_path.is_file():
        raise DatasetError(f"{root} is not a prepared dataset (needs info.json and manifest.parquet): "
                           f"run `worldtune prepare` first")
    info = json.loads(info_path.read_text())
    if info.get("format") != "worldtune.dataset":
        raise DatasetError(f"{info_path}: format is {info.get('format')!r}, expected 'worldtune.dataset'")
    rows = pq.read_table(man_path).to_pylist()
    return info, rows


def read_clip_frames(root: str | Path, row: dict[str, Any]) -> np.ndarray:
    """The packed frames [T, H, W, 3] of one clip (grid or single layouts)."""
    from worldtune.data.video import read_frames

    if not row.get("video"):
        raise DatasetError(f"clip {row.get('clip_id')} has separate views; this model takes one packed video")
    from worldtune.names import inside

    return read_frames(inside(root, row["video"], f"{root}: clip {row.get('clip_id')} video"))


class ShardedSampler:
    """An endless stream of shuffled clip indices, epoch after epoch, cut into global batches."""

    def __init__(self, n: int, seed: int, rank: int = 0, world: int = 1):
        if n <= 0:
            raise DatasetError("the training set is empty: no clips with split='train' (check prepare's report)")
        self.n, self.seed, self.rank, self.world = n, seed, rank, world
        self.epoch, self.cursor = 0, 0

    def _perm(self, epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 7919 + epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def next_global(self, global_batch: int) -> list[int]:
        out: list[int] = []
        while len(out) < global_batch:
            perm = self._perm(self.epoch)
            take = perm[self.cursor:self.cursor + global_batch - len(out)]
            out += take
            self.cursor += len(take)
            if self.cursor >= self.n:
                self.epoch, self.cursor = self.epoch + 1, 0
        return out

    def next_local(self, batch: int) -> tuple[list[int], list[int]]:
        """(clip indices, positions within the global batch) for this process."""
        glob = self.next_global(batch * self.world)
        pos = list(range(self.rank * batch, (self.rank + 1) * batch))
        return [glob[p] for p in pos], pos

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])


class CachedClips:
    """Clips of one split whose latents and prompt embedding are in a LatentCache."""

    def __init__(self, rows: list[dict[str, Any]], cache, split: str = "train"):
        self.cache = cache
        self.rows = [r for r in rows if r.get("split", "train") == split and r["clip_id"] in cache.clip_ids]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        return {"latents": self.cache.latents(row["clip_id"]).float(), "text": self.cache.text(row["prompt"]).float(),
                "clip_id": row["clip_id"], "prompt": row["prompt"]}


class DecodedClips:
    """Clips of one split decoded from their mp4s; a random contiguous window of `num_frames`."""

    def __init__(self, root: str | Path, rows: list[dict[str, Any]], num_frames: int, split: str = "train"):
        self.root, self.num_frames = Path(root), num_frames
        self.rows = [r for r in rows if r.get("split", "train") == split]

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, i: int, generator: torch.Generator) -> dict[str, Any]:
        row = self.rows[i]
        frames = read_clip_frames(self.root, row)
        if len(frames) < self.num_frames:
            raise DatasetError(f"clip {row['clip_id']} has {len(frames)} frames, fewer than train.num_frames="
                               f"{self.num_frames}")
        start = int(torch.randint(0, len(frames) - self.num_frames + 1, (), generator=generator))
        return {"frames": frames[start:start + self.num_frames], "clip_id": row["clip_id"], "prompt": row["prompt"]}
