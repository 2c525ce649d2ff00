"""Robot actions (and states) kept beside each prepared clip, for action-conditioned world models.

A forward-dynamics model learns "first frame + the actions taken -> the video that follows", so each clip
needs the actions of exactly its frames. `prepare` (with `prepare.actions.key` set) reads the action
column of the LeRobot data files once, drops episodes whose actions are missing or not finite (counted
in the report, like any other drop), and writes, in the prepared folder (docs/data.md, "Actions"):

- `actions/<clip_id>.safetensors`: tensors `action` [(F-1)*stride+1, D] float32 (and `state` [.., S]
  when `state_key` is set): the rows of the clip's source frames, from its first frame to its last,
  at the source rate; clip frame k is row k*stride. Keeping the source rate loses nothing when the clip
  skips frames: `clip_chunk` picks the rows at the clip's frames (NVIDIA's convention: the action
  sampled at each video frame leads to the next one).
- `actions.json`: format "worldtune.actions" version 1, the feature keys, names and widths, the
  model's embodiment domain (models/action_dynamics.py), the normalisation training applies, and
  per-dimension statistics (mean, std, min, max, q01, q99) of the training episodes only, so held-out
  episodes never leak into the scaling.

Both are rewritten at the end of every run (they are small), so a rerun with other action settings, or
after a kill, leaves them consistent with the manifest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from worldtune.atomic import atomic_write_bytes, atomic_write_json
from worldtune.config import ActionsConfig
from worldtune.data.lerobot import LeRobotDataset, parquet_columns
from worldtune.errors import DatasetError
from worldtune.models.action_dynamics import ActionDomain
from worldtune.models.family import action_dynamics

FORMAT = "worldtune.actions"
VERSION = 1
FOLDER = "actions"
INDEX = "actions.json"
DROP_REASONS = ("missing_actions", "nonfinite_actions")
QUANTILE_ROWS = 1 << 20  # quantiles from at most this many rows (evenly spaced); the moments use every row
_EPS = 1e-8  # NVIDIA's clamp on the scale denominators


@dataclass
class EpisodeActions:
    """One episode's rows in frame order: actions [T, D] and states [T, S] (or None)."""

    action: np.ndarray
    state: np.ndarray | None


class ActionSource:
    """The action (and state) columns of a LeRobot dataset, read once and checked per episode."""

    def __init__(self, ds: LeRobotDataset, cfg: ActionsConfig) -> None:
        self.cfg = cfg
        self.info_path = ds.root / "meta" / "info.json"
        feats = ds.info.get("features") or {}
        keys = [cfg.key] + ([cfg.state_key] if cfg.state_key else [])
        for key, field in zip(keys, ("key", "state_key")):
            if key not in feats:
                have = sorted(k for k, f in feats.items() if isinstance(f, dict) and f.get("dtype") != "video")
                where = self.info_path if ds.version != "plain" else ds.root
                raise DatasetError(f"{where} has no feature '{key}' (non-video features: {', '.join(have) or 'none'}): "
                                   f"set prepare.actions.{field} to one of them, or unset prepare.actions.key to "
                                   "prepare clips without actions")
        self.names, self.width = _names_and_width(feats[cfg.key], cfg.key, self.info_path)
        self.state_names, self.state_width = (_names_and_width(feats[cfg.state_key], cfg.state_key, self.info_path)
                                              if cfg.state_key else (None, 0))
        self.dynamics = action_dynamics()
        self.domain: ActionDomain = self.dynamics.resolve_domain(cfg.domain, cfg.domain_id, self.width,
                                                                 str(ds.info.get("robot_type") or ""),
                                                                 str(self.info_path))
        self.normalization = cfg.normalization if cfg.normalization != "auto" else (
            self.dynamics.default_normalization(self.domain))
        self.episodes, self.bad = _read_columns(ds, cfg.key, cfg.state_key, self.width, self.state_width)

    # ------------------------------------------------------------------ checks
    def drop_reason(self, episode: int, length: int) -> str | None:
        """Why an episode cannot be used with actions: rows missing (absent, null, gaps, fewer than its
        frames) or values that are NaN/inf; None when it can."""
        if episode in self.bad:
            return self.bad[episode]
        ep = self.episodes.get(episode)
        if ep is None or len(ep.action) < length:
            return "missing_actions"
        rows = ep.action[:length], (ep.state[:length] if ep.state is not None else np.zeros(0))
        return None if all(np.isfinite(r).all() for r in rows) else "nonfinite_actions"

    # ------------------------------------------------------------------ outputs
    def clip_rows(self, episode: int, start: int, end: int) -> dict[str, np.ndarray]:
        """The rows of source frames [start, end) of an episode: what one clip's file holds."""
        ep = self.episodes[episode]
        out = {"action": np.ascontiguousarray(ep.action[start:end])}
        if ep.state is not None:
            out["state"] = np.ascontiguousarray(ep.state[start:end])
        return out

    def write(self, out: Path, rows: list[dict], splits: dict[int, str]) -> dict:
        """Write every clip's file and `actions.json`; returns the summary info.json and the report keep."""
        from safetensors.numpy import save

        for r in rows:
            arrays = self.clip_rows(r["episode_index"], r["start_frame"], r["end_frame"])
            meta = {"format": FORMAT, "version": str(VERSION), "clip_id": r["clip_id"],
                    "episode_index": str(r["episode_index"]), "start_frame": str(r["start_frame"]),
                    "stride": str(r["stride"])}
            atomic_write_bytes(out / FOLDER / f"{r['clip_id']}.safetensors", save(arrays, metadata=meta))
        train = sorted(e for e, s in splits.items() if s == "train")
        stats = {"action": column_stats([self.episodes[e].action for e in train], self.width)}
        if self.cfg.state_key:
            stats["state"] = column_stats([self.episodes[e].state for e in train], self.state_width)
        index = {
            "format": FORMAT, "version": VERSION, "key": self.cfg.key, "state_key": self.cfg.state_key,
            "width": self.width, "names": self.names, "state_width": self.state_width,
            "state_names": self.state_names, "domain": self.domain.to_dict(),
            "same_width_domains": self.dynamics.matching_domains(self.width), "normalization": self.normalization,
            "rows": "source frames start_frame..end_frame-1 of the clip; clip frame k is row k * stride",
            "files": f"{FOLDER}/<clip_id>.safetensors", "stats_episodes": len(train), "stats": stats,
        }
        atomic_write_json(out / INDEX, index, indent=2)
        return {"file": INDEX, "key": self.cfg.key, "width": self.width, "domain": self.domain.to_dict(),
                "normalization": self.normalization, "clips": len(rows)}


def remove_index(out: Path) -> None:
    """A run without actions leaves no `actions.json` behind that would describe another run's clips."""
    (out / INDEX).unlink(missing_ok=True)


# ------------------------------------------------------------------------------ statistics
def column_stats(arrays: list[np.ndarray], width: int) -> dict[str, list[float] | int]:
    """Per-dimension mean, std, min, max, q01, q99 (and the row count) of the rows of `arrays`."""
    rows = np.concatenate(arrays).astype(np.float64) if arrays else np.zeros((0, width))
    if not len(rows):
        nan = [float("nan")] * width
        return {"count": 0, "mean": nan, "std": nan, "min": nan, "max": nan, "q01": nan, "q99": nan}
    sample = rows[np.linspace(0, len(rows) - 1, min(len(rows), QUANTILE_ROWS)).astype(np.int64)]
    q01, q99 = np.quantile(sample, [0.01, 0.99], axis=0)
    return {"count": len(rows), "mean": rows.mean(0).tolist(), "std": rows.std(0).tolist(),
            "min": rows.min(0).tolist(), "max": rows.max(0).tolist(), "q01": q01.tolist(), "q99": q99.tolist()}


def normalize(x, stats: dict, method: str):
    """Actions scaled for training: `quantile` and `minmax` map their range to [-1, 1], `meanstd` to unit
    variance, `none` leaves them (NVIDIA's formulas, denominators clamped at 1e-8). numpy or torch."""
    if method == "none":
        return x
    a, b = _affine(x, stats, method)
    return (x - a) / b


def denormalize(x, stats: dict, method: str):
    """The inverse of `normalize` (for actions a model predicts)."""
    if method == "none":
        return x
    a, b = _affine(x, stats, method)
    return x * b + a


def _affine(x, stats: dict, method: str):
    """(offset, scale) of a method, as arrays of x's kind."""
    def arr(v):
        if isinstance(x, np.ndarray):
            return np.asarray(v, dtype=x.dtype)
        import torch

        return torch.as_tensor(v, dtype=x.dtype, device=x.device)

    lo_hi = {"quantile": ("q01", "q99"), "minmax": ("min", "max")}
    if method in lo_hi:
        lo, hi = (np.asarray(stats[k], np.float64) for k in lo_hi[method])
        return arr((lo + hi) / 2), arr(np.maximum(hi - lo, _EPS) / 2)
    if method == "meanstd":
        return arr(stats["mean"]), arr(np.maximum(np.asarray(stats["std"], np.float64), _EPS))
    raise ValueError(f"unknown action normalisation {method!r}")


# ------------------------------------------------------------------------------ reading back
def read_index(dataset: str | Path) -> dict:
    """`actions.json` of a prepared folder, checked; a one-line error says how to get one."""
    path = Path(dataset) / INDEX
    if not path.is_file():
        raise DatasetError(f"{Path(dataset)} has no {INDEX}: it was prepared without actions; rerun prepare with "
                           "prepare.actions.key set to the dataset's action feature")
    index = json.loads(path.read_text())
    if index.get("format") != FORMAT or index.get("version") != VERSION:
        raise DatasetError(f"{path} is not {FORMAT} version {VERSION}: rerun prepare with this worldtune")
    return index


def load_clip(dataset: str | Path, clip_id: str) -> dict[str, np.ndarray]:
    """The arrays of one clip's action file."""
    from safetensors.numpy import load_file

    path = Path(dataset) / FOLDER / f"{clip_id}.safetensors"
    if not path.is_file():
        raise DatasetError(f"{path} is missing: rerun prepare into {Path(dataset)} to rewrite the action files")
    return load_file(path)


def clip_chunk(rows: np.ndarray, stride: int) -> np.ndarray:
    """The action chunk of a clip [F-1, D]: the row at each clip frame but the last; action k is taken at
    frame k and leads to frame k+1 (F frames, F-1 transitions, as Cosmos 3's `chunk_size`)."""
    return rows[:len(rows) - 1:stride]


def check_chunk(actions: np.ndarray, width: int, where: str) -> np.ndarray:
    """An action chunk [T, width] of finite numbers, or a one-line error naming `where` and the fix."""
    a = np.asarray(actions, dtype=np.float32)
    if a.ndim != 2 or a.shape[1] != width:
        raise DatasetError(f"{where}: actions of shape {list(a.shape)}, the domain takes [T, {width}]: give "
                           f"{width} numbers per step")
    if not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))[0].tolist()
        raise DatasetError(f"{where}: action step {bad[0]} entry {bad[1]} is {a[tuple(bad)]}: every action must be "
                           "a finite number")
    return a


# ------------------------------------------------------------------------------ parquet
def _names_and_width(feature: dict, key: str, where: Path) -> tuple[list[str], int]:
    """Entry names and width of a 1-D feature (`names` may be a list or {"motors": [...]})."""
    shape = (feature.get("shape") if isinstance(feature, dict) else None) or []
    if len(shape) != 1 or not isinstance(shape[0], int) or shape[0] < 1:
        raise DatasetError(f"{where}: feature '{key}' has shape {shape}, not a vector [D]: choose a vector feature "
                           "for prepare.actions")
    width = int(shape[0])
    names = feature.get("names")
    if isinstance(names, dict):
        names = next(iter(names.values()), None)
    if isinstance(names, list) and len(names) == width and all(isinstance(n, str) for n in names):
        return list(names), width
    return [f"{key}_{i}" for i in range(width)], width


def _read_columns(ds: LeRobotDataset, key: str, state_key: str | None, width: int,
                  state_width: int) -> tuple[dict[int, EpisodeActions], dict[int, str]]:
    """episode -> rows in frame order, from every data file; episodes whose rows have gaps or nulls are
    returned as bad (episode -> reason) instead."""
    files = sorted((ds.root / "data").rglob("*.parquet"))
    if not files:
        raise DatasetError(f"{ds.root / 'data'} has no parquet files, so no per-frame actions: prepare.actions needs "
                           "a LeRobot dataset with its data/ folder")
    parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]]] = {}
    for f in files:
        names = parquet_columns(f, "restore the file")
        wanted = ["episode_index", "frame_index", key] + ([state_key] if state_key else [])
        missing = [c for c in wanted if c not in names]
        if missing:
            raise DatasetError(f"{f} has no column {', '.join(missing)}: every data file must hold the actions; "
                               "check prepare.actions.key / state_key")
        t = pq.read_table(f, columns=wanted)
        eps = t.column("episode_index").to_numpy()
        frames = t.column("frame_index").to_numpy()
        act, act_ok = _vectors(t.column(key), width, f, key)
        st, st_ok = _vectors(t.column(state_key), state_width, f, state_key) if state_key else (None, act_ok)
        ok = act_ok & st_ok
        for e in np.unique(eps):
            m = eps == e
            parts.setdefault(int(e), []).append((frames[m], act[m], st[m] if st is not None else None, ok[m]))
    episodes, bad = {}, {}
    for e, chunks in parts.items():
        frames = np.concatenate([c[0] for c in chunks])
        order = np.argsort(frames, kind="stable")
        if not np.array_equal(frames[order], np.arange(len(frames))) or not np.concatenate([c[3] for c in chunks]).all():
            bad[e] = "missing_actions"
            continue
        episodes[e] = EpisodeActions(np.concatenate([c[1] for c in chunks])[order],
                                     np.concatenate([c[2] for c in chunks])[order] if state_key else None)
    return episodes, bad


def _vectors(col: pa.ChunkedArray, width: int, where: Path, key: str) -> tuple[np.ndarray, np.ndarray]:
    """A list (or scalar) column as float32 [N, width] and a mask of rows that are present (not null);
    nulls inside a row become NaN. A row of another width is a damaged dataset: a one-line error."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    present = ~col.is_null().to_numpy(zero_copy_only=False)
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type)):
        if width != 1:
            raise DatasetError(f"{where}: column '{key}' holds single numbers but info.json says {width} entries: "
                               "fix the dataset's features")
        return col.to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, 1), present
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    wrong = present & (lengths != width)
    if wrong.any():
        raise DatasetError(f"{where}: row {int(np.argmax(wrong))} of '{key}' has {int(lengths[wrong][0])} entries, "
                           f"info.json says {width}: fix the dataset (every row of a feature has its width)")
    out = np.full((len(col), width), np.nan, np.float32)  # null rows stay NaN (and are flagged absent)
    out[present] = np.asarray(pc.list_flatten(col).to_numpy(zero_copy_only=False), np.float32).reshape(-1, width)
    return out, present
