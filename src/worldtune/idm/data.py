"""Frames and actions of a LeRobot dataset, as the inverse-dynamics model sees them.

Why the views are resized here, one by one, to the IDM's view size with the layout's resize
policy: a generated grid video is split back into cells that prepare filled with the same
resize, so with the view size of a grid cell the IDM sees a real episode at training time
exactly as it will see a generated one at labelling time.

A training example is a window: frames t..t+H of every camera and the actions t..t+H-1 (the
chunk). Windows that run past the episode's end repeat its last frame and last action, the way
labelling pads them, so every frame of an episode is a valid window start.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from worldtune.data.layout import resize_frames
from worldtune.data.lerobot import LeRobotDataset
from worldtune.errors import DatasetError


@dataclass
class ActionEpisode:
    """One episode: every camera's resized frames [V, T, h, w, 3] uint8 and its actions [T, D]."""

    index: int
    views: np.ndarray
    actions: np.ndarray
    task: str | None = None

    @property
    def length(self) -> int:
        return int(self.actions.shape[0])


def action_names(ds: LeRobotDataset, key: str) -> list[str]:
    """Names of the action vector's entries from info.json (`names` may be a list or {"motors": [...]})."""
    info_path = ds.root / "meta" / "info.json"
    feat = (ds.info.get("features") or {}).get(key)
    if not isinstance(feat, dict):
        raise DatasetError(f"{info_path} has no '{key}' feature, so there are no ground-truth actions to learn from: "
                           f"set idm.action_key to the dataset's action feature")
    shape = feat.get("shape") or []
    dim = int(shape[0]) if shape else 0
    names = feat.get("names")
    if isinstance(names, dict):
        names = next(iter(names.values()), None)
    if isinstance(names, list) and all(isinstance(n, str) for n in names) and (not dim or len(names) == dim):
        return list(names)
    if not dim:
        raise DatasetError(f"{info_path}: feature '{key}' has neither names nor a shape; cannot tell its size")
    return [f"{key}_{i}" for i in range(dim)]


def read_actions(ds: LeRobotDataset, key: str) -> dict[int, np.ndarray]:
    """episode index -> actions [T, D] float32 in frame order, from every data parquet file."""
    files = sorted((ds.root / "data").rglob("*.parquet"))
    if not files:
        raise DatasetError(f"{ds.root / 'data'} has no parquet files: the dataset has no per-frame data (actions)")
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for f in files:
        if key not in pq.ParquetFile(f).schema_arrow.names:
            raise DatasetError(f"{f} has no '{key}' column: every data file must hold the actions "
                               f"(or set idm.action_key)")
        t = pq.read_table(f, columns=["episode_index", "frame_index", key])
        eps = t.column("episode_index").to_numpy()
        frames = t.column("frame_index").to_numpy()
        acts = action_rows(t.column(key).to_pylist(), eps, frames, f"{f}: the '{key}'")
        for e in np.unique(eps):
            m = eps == e
            parts.setdefault(int(e), []).append((frames[m], acts[m]))
    out = {}
    for e, chunks in parts.items():
        frames = np.concatenate([c[0] for c in chunks])
        acts = np.concatenate([c[1] for c in chunks])
        out[e] = acts[np.argsort(frames, kind="stable")]
    return out


def action_rows(values: list[Any], episodes: np.ndarray, frames: np.ndarray, what: str) -> np.ndarray:
    """A parquet action column as [N, D] float32. Every row must be D finite numbers: a NaN or an infinity would
    become the NaN mean and std that normalise every label, and a short, empty or text row means the file is
    damaged, so the first bad row is named (`what`, its episode and frame) in one line."""
    try:
        acts = np.asarray(values, np.float32)
    except (TypeError, ValueError):
        acts = None
    if acts is None or acts.ndim not in (1, 2):
        lengths = Counter(len(v) for v in values if _numbers(v))
        width = lengths.most_common(1)[0][0] if lengths else 0
        for i, v in enumerate(values):
            why = ("is empty" if v is None else "is not a list of numbers" if not _numbers(v)
                   else f"has {len(v)} numbers, the others have {width}" if len(v) != width else None)
            if why:
                raise DatasetError(f"{what} row of episode {episodes[i]}, frame {frames[i]} {why}: fix that row or "
                                   f"drop its episode")
        raise DatasetError(f"{what} column is not one number or one list of numbers a row: fix the dataset")
    if acts.ndim == 1:
        acts = acts[:, None]
    bad = np.flatnonzero(~np.isfinite(acts).all(1))
    if len(bad):
        i = int(bad[0])
        raise DatasetError(f"{what} row of episode {episodes[i]}, frame {frames[i]} is not finite "
                           f"({acts[i].tolist()}; {len(bad)} such rows): fix or drop those episodes; the IDM would "
                           "learn NaN statistics and label with them")
    return acts


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)


def check_cameras(ds: LeRobotDataset, cameras: dict[str, str]) -> None:
    missing = [k for k in cameras.values() if k not in ds.cameras]
    if missing:
        raise DatasetError(f"{ds.root / 'meta' / 'info.json'} has no camera(s) {missing} (it has {sorted(ds.cameras)}): "
                           f"set idm.cameras to role -> camera key")


def load_episodes(ds: LeRobotDataset, cameras: dict[str, str], action_key: str, size: tuple[int, int],
                  resize: str = "pad", max_episodes: int | None = None) -> tuple[list[ActionEpisode], dict[str, int]]:
    """Every usable episode (all cameras decoded and resized) and the count of skipped ones by reason."""
    check_cameras(ds, cameras)
    actions = read_actions(ds, action_key)
    episodes, skipped = [], {"missing_camera": 0, "no_actions": 0, "corrupt_video": 0}
    for ep in ds.episodes[:max_episodes]:
        if ep.index not in actions:
            skipped["no_actions"] += 1
            continue
        if any(k not in ep.spans for k in cameras.values()):
            skipped["missing_camera"] += 1
            continue
        try:
            views = [resize_frames(ds.episode_frames(ep, k), *size, resize) for k in cameras.values()]
        except DatasetError:
            skipped["corrupt_video"] += 1
            continue
        n = min(len(actions[ep.index]), *(len(v) for v in views))
        episodes.append(ActionEpisode(ep.index, np.stack([v[:n] for v in views]), actions[ep.index][:n], ep.task))
    if not episodes:
        raise DatasetError(f"{ds.root}: no episode has every camera {list(cameras.values())} and actions "
                           f"(skipped: {skipped})")
    return episodes, skipped


def split_episodes(n: int, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) positions: a seeded choice of whole episodes, at least one of each."""
    if n < 2:
        raise DatasetError(f"the IDM needs at least 2 usable episodes (one held out), found {n}")
    order = np.random.default_rng(seed).permutation(n)
    k = min(n - 1, max(1, int(round(val_fraction * n))))
    return sorted(order[k:].tolist()), sorted(order[:k].tolist())
