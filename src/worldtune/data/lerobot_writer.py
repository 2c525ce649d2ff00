"""`LeRobotWriter`: write a LeRobot v3.0 dataset, episode by episode, with pyarrow and PyAV.

What lerobot (0.4+) reads, and so what we write (the reader beside this file reads it back):
- `meta/info.json`: codebase_version "v3.0", integer fps, features (every camera a `video`
  feature with shape [H, W, 3] and codec info; `action` with its names; the index columns),
  totals, path templates, splits;
- `meta/tasks.parquet`: one row per task, the task text as the pandas index "task" and a
  `task_index` column (pandas metadata is written so pandas sees the index);
- `meta/episodes/chunk-000/file-000.parquet`: per episode its length, tasks, global row span
  [dataset_from_index, dataset_to_index), data file, and per camera its video file and time span
  [from_timestamp, to_timestamp), plus any extra per-episode columns the caller passes;
- `data/chunk-CCC/file-FFF.parquet`: one row per frame (timestamp = frame_index / fps);
- `videos/<camera key>/chunk-CCC/file-FFF.mp4`: the episodes of a file concatenated, so episode i
  spans [from_timestamp, to_timestamp) of it;
- `meta/stats.json`: mean/std/min/max/count of the numeric features and per-channel image stats.

Frames may be given as RGB arrays or as decoded `av.VideoFrame`s; the latter are encoded as they
are (no colour conversion), so with lossless encoding the written file decodes to exactly the
frames it was given.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from worldtune.data.video import VideoWriter, atomic_write_bytes
from worldtune.errors import DatasetError

CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
STATS_EVERY = 8  # image stats from every 8th frame, 4x subsampled: enough for normalisation constants

Frame = np.ndarray | av.VideoFrame


@dataclass(frozen=True)
class VideoEncoding:
    """How camera videos are encoded: h264 (libx264) or AV1 (libsvtav1, lerobot's default), lossless or not."""

    codec: str = "h264"
    lossless: bool = True
    crf: int | None = None  # lossy quality; None = 18 (h264) or 30 (av1)
    gop: int = 2

    def writer(self, path: Path, fps: int) -> VideoWriter:
        if self.codec == "h264":  # x264 at crf 0 (8-bit) is lossless, as qp 0
            return VideoWriter(path, fps, "libx264", crf=0 if self.lossless else (self.crf or 18), preset="veryfast",
                               gop=self.gop)
        if self.codec == "av1":
            os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole config per file otherwise
            return VideoWriter(path, fps, "libsvtav1", crf=None if self.lossless else (self.crf or 30), gop=self.gop,
                               options={"svtav1-params": "lossless=1"} if self.lossless else None)
        raise DatasetError(f"unknown video codec {self.codec!r}: use h264 or av1")


def _location(file_no: int) -> tuple[int, int]:
    """(chunk_index, file_index) of the file_no-th file."""
    return file_no // CHUNKS_SIZE, file_no % CHUNKS_SIZE


class _Stats:
    """Running sum / sum of squares / min / max of vectors (the numbers stats.json holds)."""

    def __init__(self) -> None:
        self.n, self.s, self.ss, self.lo, self.hi = 0, 0.0, 0.0, None, None

    def add(self, x: np.ndarray) -> None:  # x [N, D]
        x = x.astype(np.float64)
        self.n += len(x)
        self.s = self.s + x.sum(0)
        self.ss = self.ss + (x ** 2).sum(0)
        self.lo = x.min(0) if self.lo is None else np.minimum(self.lo, x.min(0))
        self.hi = x.max(0) if self.hi is None else np.maximum(self.hi, x.max(0))

    def to_dict(self, image: bool = False) -> dict[str, Any]:
        mean = self.s / self.n
        std = np.sqrt(np.maximum(self.ss / self.n - mean ** 2, 0))
        shape = (lambda v: v.reshape(-1, 1, 1).tolist()) if image else (lambda v: np.atleast_1d(v).tolist())
        return {"mean": shape(mean), "std": shape(std), "min": shape(self.lo), "max": shape(self.hi), "count": [self.n]}


class LeRobotWriter:
    """Writes episodes into a new LeRobot v3.0 dataset at `root`; `finish()` writes the metadata.

    `cameras` maps each camera key to its (height, width); every episode must give frames of that
    size for every camera and one action per frame. `episode_columns` are extra per-episode
    values (source, scores, ...) written beside the episode's index columns.
    """

    def __init__(self, root: str | Path, fps: int, cameras: dict[str, tuple[int, int]], action_names: Sequence[str],
                 encoding: VideoEncoding = VideoEncoding(), episodes_per_file: int = 500,
                 robot_type: str | None = None) -> None:
        self.root = Path(root)
        self.fps, self.cameras, self.names = int(fps), dict(cameras), list(action_names)
        self.encoding, self.per_file, self.robot_type = encoding, max(1, episodes_per_file), robot_type
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict[str, Any]] = []
        self.frames = 0
        self._writers: dict[str, VideoWriter] = {}
        self._tables: list[pa.Table] = []
        self._offset = 0  # frames already in the current video files
        self._stats = {"action": _Stats(), **{k: _Stats() for k in self.cameras}}
        for k in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
            self._stats[k] = _Stats()

    # ------------------------------------------------------------------ episodes
    def add_episode(self, frames: dict[str, Sequence[Frame]], actions: np.ndarray, task: str, is_synthetic: bool,
                    episode_columns: dict[str, Any] | None = None) -> int:
        """Append one episode; returns its episode_index."""
        n = len(actions)
        ep = len(self.episodes)
        for key, (h, w) in self.cameras.items():
            got = frames.get(key)
            if got is None or len(got) != n:
                raise DatasetError(f"episode {ep}: camera {key} has {0 if got is None else len(got)} frames, "
                                   f"actions have {n}")
            size = _size(got[0])
            if size != (h, w):
                raise DatasetError(f"episode {ep}: camera {key} frames are {size[0]}x{size[1]}, the dataset's are {h}x{w}")
        if actions.ndim != 2 or actions.shape[1] != len(self.names):
            raise DatasetError(f"episode {ep}: actions have shape {actions.shape}, expected [T, {len(self.names)}]")
        file_no = ep // self.per_file
        if ep % self.per_file == 0:
            self._close_file()
            self._open_file(file_no)
        for key, got in frames.items():
            if key not in self.cameras:
                continue
            for i, f in enumerate(got):
                self._writers[key].write(_fresh(f))
                if i % STATS_EVERY == 0:
                    rgb = f.to_ndarray(format="rgb24") if isinstance(f, av.VideoFrame) else f
                    self._stats[key].add(rgb[::4, ::4].reshape(-1, 3) / 255.0)
        task_index = self.tasks.setdefault(task, len(self.tasks))
        first = self.frames
        frame_index = np.arange(n, dtype=np.int64)
        cols = {"action": actions.astype(np.float32), "timestamp": (frame_index / self.fps).astype(np.float32),
                "frame_index": frame_index, "episode_index": np.full(n, ep, np.int64),
                "index": np.arange(first, first + n, dtype=np.int64), "task_index": np.full(n, task_index, np.int64)}
        for k, v in cols.items():
            self._stats[k].add(v.reshape(n, -1))
        self._tables.append(pa.table({
            "action": pa.FixedSizeListArray.from_arrays(pa.array(cols["action"].reshape(-1)), len(self.names)),
            **{k: pa.array(v) for k, v in cols.items() if k != "action"},
            "is_synthetic": pa.array(np.full(n, is_synthetic)),
        }))
        chunk, fidx = _location(file_no)
        row: dict[str, Any] = {"episode_index": ep, "tasks": [task], "length": n,
                               "data/chunk_index": chunk, "data/file_index": fidx,
                               "dataset_from_index": first, "dataset_to_index": first + n}
        for key in self.cameras:
            row.update({f"videos/{key}/chunk_index": chunk, f"videos/{key}/file_index": fidx,
                        f"videos/{key}/from_timestamp": self._offset / self.fps,
                        f"videos/{key}/to_timestamp": (self._offset + n) / self.fps})
        row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0, "is_synthetic": is_synthetic,
                    **(episode_columns or {})})
        self.episodes.append(row)
        self.frames += n
        self._offset += n
        return ep

    def _open_file(self, file_no: int) -> None:
        chunk, fidx = _location(file_no)
        self._writers = {k: self.encoding.writer(self.root / VIDEO_PATH.format(video_key=k, chunk_index=chunk,
                                                                                file_index=fidx), self.fps)
                         for k in self.cameras}
        self._tables, self._offset, self._file_no = [], 0, file_no

    def _close_file(self) -> None:
        if not self._writers:
            return
        for w in self._writers.values():
            w.close()
        chunk, fidx = _location(self._file_no)
        _write_parquet(self.root / DATA_PATH.format(chunk_index=chunk, file_index=fidx), pa.concat_tables(self._tables))
        self._writers = {}

    def abort(self) -> None:
        for w in self._writers.values():
            w.abort()
        self._writers = {}

    # ------------------------------------------------------------------ metadata
    def features(self) -> dict[str, Any]:
        codec = self.encoding.codec
        feats: dict[str, Any] = {}
        for key, (h, w) in self.cameras.items():
            feats[key] = {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
                          "info": {"video.height": h, "video.width": w, "video.codec": codec, "video.pix_fmt": "yuv420p",
                                   "video.is_depth_map": False, "video.fps": self.fps, "video.channels": 3,
                                   "has_audio": False}}
        feats["action"] = {"dtype": "float32", "shape": [len(self.names)], "names": self.names}
        feats["is_synthetic"] = {"dtype": "bool", "shape": [1], "names": None}
        feats["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
        for k in ("frame_index", "episode_index", "index", "task_index"):
            feats[k] = {"dtype": "int64", "shape": [1], "names": None}
        return feats

    def finish(self) -> dict[str, Any]:
        """Close the last files and write meta/: episodes, tasks, stats, info. Returns info.json's content."""
        if not self.episodes:
            raise DatasetError(f"no episodes to write into {self.root}")
        self._close_file()
        keys = list(dict.fromkeys(k for row in self.episodes for k in row))
        _write_parquet(self.root / EPISODES_PATH, pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in self.episodes]))
        _write_parquet(self.root / "meta" / "tasks.parquet", tasks_table(self.tasks))
        stats = {k: s.to_dict(image=k in self.cameras) for k, s in self._stats.items()}
        _write_json(self.root / "meta" / "stats.json", stats)
        n = len(self.episodes)
        info = {"codebase_version": "v3.0", "robot_type": self.robot_type, "total_episodes": n,
                "total_frames": self.frames, "total_tasks": len(self.tasks), "chunks_size": CHUNKS_SIZE,
                "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": self.fps,
                "splits": {"train": f"0:{n}"}, "data_path": DATA_PATH, "video_path": VIDEO_PATH,
                "features": self.features()}
        _write_json(self.root / "meta" / "info.json", info)
        return info


def _fresh(frame: Frame) -> Frame:
    """A decoded frame's yuv420p planes in a new frame: the same pixels, without the source file's
    timestamps and time base (the encoder numbers frames itself, so episodes follow each other)."""
    if isinstance(frame, av.VideoFrame):
        return av.VideoFrame.from_ndarray(frame.to_ndarray(format="yuv420p"), format="yuv420p")
    return frame


def _size(frame: Frame) -> tuple[int, int]:
    if isinstance(frame, av.VideoFrame):
        return frame.height, frame.width
    return int(frame.shape[0]), int(frame.shape[1])


def tasks_table(tasks: dict[str, int]) -> pa.Table:
    """tasks.parquet as lerobot writes it with pandas: `task` is the index, `task_index` a column."""
    pandas_meta = {"index_columns": ["task"], "column_indexes": [],
                   "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                                "numpy_type": "int64", "metadata": None},
                               {"name": "task", "field_name": "task", "pandas_type": "unicode",
                                "numpy_type": "object", "metadata": None}],
                   "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.0"}
    t = pa.table({"task_index": pa.array(list(tasks.values()), pa.int64()), "task": pa.array(list(tasks), pa.string())})
    return t.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _write_parquet(path: Path, table: pa.Table) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())
