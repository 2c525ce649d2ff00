"""Read LeRobot datasets (v2.0, v2.1, v3.0) and plain video folders with pyarrow and PyAV only.

Why not the `lerobot` package: it pins its own Python and torch; the format is small enough to
read directly (docs/data.md). What we need from a dataset is: its episodes (index,
length, task text, success flag), its cameras (feature key, size, fps, codec) and, for an
episode and a camera, a video file plus the time span holding that episode's frames.

- v2.x: one mp4 per episode per camera; `meta/episodes.jsonl`, `meta/tasks.jsonl`.
- v3.0: many episodes concatenated per mp4; `meta/episodes/*/*.parquet` gives each episode's
  [from_timestamp, to_timestamp) per camera. Real converted sets can carry a wrong
  `data/file_index`; we never use it (lengths come from `length` or the from/to indices).
- plain: `videos/NAME.mp4` + `metas/NAME.txt` (the GR1 / diffusers example layout): one camera
  whose key is `video`, task = the text file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from worldtune.errors import DatasetError
from worldtune.names import inside

PLAIN_CAMERA = "video"
SUCCESS_KEYS = ("is_episode_successful", "success", "episode_success")


@dataclass(frozen=True)
class CameraFeature:
    """A camera (a `video` feature): its key and what info.json says about its frames."""

    key: str
    height: int | None
    width: int | None
    fps: float | None
    codec: str | None


@dataclass(frozen=True)
class VideoSpan:
    """Where an episode's frames of one camera live: a file and a time span (None = whole file)."""

    path: Path
    start_time: float | None = None
    end_time: float | None = None


@dataclass
class Episode:
    """One episode: its length in frames, task texts (None = unreadable), success flag if known."""

    index: int
    length: int
    tasks: list[str | None] = field(default_factory=list)
    success: bool | None = None
    spans: dict[str, VideoSpan] = field(default_factory=dict)  # camera key -> span (missing = absent)

    @property
    def task(self) -> str | None:
        """The first task text; None when missing or not valid UTF-8."""
        return self.tasks[0] if self.tasks else None


class LeRobotDataset:
    """A LeRobot (v2.0, v2.1, v3.0) or plain video dataset at `root`, read lazily where it is cheap."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise DatasetError(f"dataset {self.root} does not exist: expected a LeRobot dataset folder "
                               "(meta/info.json) or a folder with videos/*.mp4 and metas/*.txt")
        info_path = self.root / "meta" / "info.json"
        self.info: dict[str, Any] = {}
        if info_path.is_file():
            self.info = _read_json(info_path)
            if not isinstance(self.info, dict):
                raise DatasetError(f"{info_path} is not a JSON object: the dataset's metadata is damaged")
            self.version = str(self.info.get("codebase_version", ""))
            if not self.version.startswith(("v2.", "v3.")):
                raise DatasetError(f"{info_path}: codebase_version {self.version or '(none)'} is not supported: "
                                   "worldtune reads LeRobot v2.0, v2.1 and v3.0")
            self.fps = _number(self.info.get("fps"), float, info_path, "fps") or None
            self.cameras = _camera_features(self.info, info_path)
            self.tasks = self._read_tasks()
            self.episodes = self._read_episodes_v3() if self.version.startswith("v3.") else self._read_episodes_v2()
            self._read_success()
        elif (self.root / "videos").is_dir() and any((self.root / "videos").glob("*.mp4")):
            self.version = "plain"
            self._read_plain()
        else:
            raise DatasetError(f"{self.root} is not a dataset: expected meta/info.json (LeRobot v2/v3) "
                               "or videos/*.mp4 with metas/*.txt (plain)")

    # ---------------------------------------------------------------------------- public
    def __len__(self) -> int:
        return len(self.episodes)

    def camera_keys(self) -> list[str]:
        return list(self.cameras)

    def episode_frames(self, episode: Episode, key: str, indices: Sequence[int] | None = None) -> np.ndarray:
        """Frames `[T,H,W,3]` uint8 of camera `key` in `episode` (indices count from its first frame)."""
        span = episode.spans.get(key)
        if span is None:
            raise DatasetError(f"{self.root}: episode {episode.index} has no video for camera {key}")
        from worldtune.data.video import read_frames  # PyAV only where video is read

        return read_frames(span.path, indices, span.start_time, span.end_time)

    def span_frame_count(self, episode: Episode, key: str) -> tuple[int, float]:
        """(frames, fps) of one camera's span, from the header and timestamps (no decoding)."""
        from worldtune.data.video import probe

        span = episode.spans[key]
        info = probe(span.path)
        if span.start_time is None:
            return info.num_frames, info.fps
        end = span.end_time if span.end_time is not None else info.duration
        end = min(end, info.duration) if info.duration > 0 else end
        return max(0, int(round((end - span.start_time) * info.fps))), info.fps

    # ---------------------------------------------------------------------------- v2 / v3
    def _read_tasks(self) -> dict[int, str | None]:
        meta = self.root / "meta"
        if (meta / "tasks.parquet").is_file():
            t = _read_parquet(meta / "tasks.parquet")
            text_col = "task" if "task" in t.column_names else next(
                (c for c in t.column_names if pa.types.is_string(t.schema.field(c).type)
                 or pa.types.is_large_string(t.schema.field(c).type)), None)
            if text_col is None or "task_index" not in t.column_names:
                raise DatasetError(f"{meta / 'tasks.parquet'}: expected columns task_index and task")
            texts = _strings(t.column(text_col))
            return {int(i): s for i, s in zip(t.column("task_index").to_pylist(), texts)}
        if (meta / "tasks.jsonl").is_file():
            out: dict[int, str | None] = {}
            for rec in _read_jsonl(meta / "tasks.jsonl"):
                if isinstance(rec, dict) and rec.get("task_index") is not None:
                    out[_number(rec["task_index"], int, meta / "tasks.jsonl", "task_index")] = rec.get("task")
            return out
        return {}

    def _read_episodes_v2(self) -> list[Episode]:
        path = self.root / "meta" / "episodes.jsonl"
        if not path.is_file():
            raise DatasetError(f"{path} is missing: a LeRobot {self.version} dataset lists its episodes there")
        chunk = _number(self.info.get("chunks_size"), int, self.root / "meta" / "info.json", "chunks_size") or 1000
        template = self.info.get("video_path")
        eps = []
        for n, rec in enumerate(_read_jsonl(path), 1):
            where = f"{path}:{n}"
            if not isinstance(rec, dict) or rec.get("episode_index") is None:
                raise DatasetError(f"{where}: the line has no episode_index; every line of episodes.jsonl needs one")
            idx = _number(rec["episode_index"], int, where, "episode_index")
            tasks = rec.get("tasks")
            if tasks is None and "task_index" in rec:
                tasks = [self.tasks.get(_number(rec["task_index"], int, where, "task_index"))]
            tasks = [t if isinstance(t, str) else None for t in (tasks if isinstance(tasks, list) else [tasks])]
            ep = Episode(idx, _number(rec.get("length"), int, where, "length") or 0, tasks, _success_of(rec))
            for key in self.cameras:
                if template:
                    p = inside(self.root, template.format(episode_chunk=idx // chunk, episode_index=idx, video_key=key,
                                                          chunk_index=idx // chunk, file_index=idx),
                               f"{self.root / 'meta' / 'info.json'} video_path")
                    if p.is_file():
                        ep.spans[key] = VideoSpan(p)
            eps.append(ep)
        return sorted(eps, key=lambda e: e.index)

    def _read_episodes_v3(self) -> list[Episode]:
        files = sorted((self.root / "meta" / "episodes").glob("*/*.parquet"))
        if not files:
            raise DatasetError(f"{self.root / 'meta' / 'episodes'} has no parquet files: a LeRobot v3.0 dataset "
                               "lists its episodes there")
        template = self.info.get("video_path") or "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
        eps = []
        for f in files:
            names = parquet_columns(f, "the dataset's episode metadata is damaged; restore the file")
            if "episode_index" not in names:
                raise DatasetError(f"{f} has no episode_index column: not LeRobot v3.0 episode metadata")
            wanted = [c for c in names if c in ("episode_index", "length", "tasks", "dataset_from_index",
                                                "dataset_to_index", *SUCCESS_KEYS) or
                      (c.startswith("videos/") and not c.startswith("videos/stats"))]
            t = _read_parquet(f, columns=wanted)
            cols = {c: t.column(c).to_pylist() for c in wanted if c != "tasks"}
            tasks_col = _task_lists(t.column("tasks")) if "tasks" in wanted else [[] for _ in range(t.num_rows)]
            for r in range(t.num_rows):
                where = f"{f} row {r}"
                idx = _number(cols["episode_index"][r], int, where, "episode_index")
                if idx is None:
                    raise DatasetError(f"{where}: episode_index is empty")
                if "dataset_from_index" in cols and "dataset_to_index" in cols \
                        and cols["dataset_from_index"][r] is not None:
                    length = (_number(cols["dataset_to_index"][r], int, where, "dataset_to_index") or 0) - \
                        _number(cols["dataset_from_index"][r], int, where, "dataset_from_index")
                else:
                    length = _number(cols.get("length", [0] * t.num_rows)[r], int, where, "length") or 0
                succ = next((bool(cols[k][r]) for k in SUCCESS_KEYS if k in cols and cols[k][r] is not None), None)
                ep = Episode(idx, length, tasks_col[r], succ)
                for key in self.cameras:
                    pre = f"videos/{key}/"
                    need = [pre + s for s in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
                    if not all(c in cols and cols[c][r] is not None for c in need):
                        continue
                    ci, fi, t0, t1 = (cols[c][r] for c in need)
                    p = inside(self.root, template.format(video_key=key, chunk_index=int(ci), file_index=int(fi)),
                               f"{self.root / 'meta' / 'info.json'} video_path")
                    if p.is_file():
                        ep.spans[key] = VideoSpan(p, float(t0), float(t1))
                eps.append(ep)
        return sorted(eps, key=lambda e: e.index)

    def _read_success(self) -> None:
        """Per-frame success columns (DROID's `is_episode_successful`) -> per-episode flags.

        `has_success_flags` says the dataset carries flags at all; an episode whose flag sits in
        an unreadable data file keeps `success = None`, and `only_successful` drops it, counted.
        """
        key = next((k for k in SUCCESS_KEYS if k in self.info.get("features", {})), None)
        self.has_success_flags = key is not None or any(e.success is not None for e in self.episodes)
        if key is None or all(e.success is not None for e in self.episodes):
            return
        flags: dict[int, bool] = {}
        for f in sorted((self.root / "data").glob("*/*.parquet")):
            try:
                t = _read_parquet(f, columns=["episode_index", key])
            except DatasetError:
                continue  # its episodes keep success = None: unknown, never "successful"
            eps = t.column("episode_index").to_numpy()
            vals = t.column(key).to_pylist()
            for e, v in zip(eps, vals):
                if int(e) not in flags and v is not None:
                    flags[int(e)] = bool(v[0] if isinstance(v, list) else v)
        for ep in self.episodes:
            if ep.success is None:
                ep.success = flags.get(ep.index)

    # ---------------------------------------------------------------------------- plain
    def _read_plain(self) -> None:
        videos = sorted((self.root / "videos").glob("*.mp4"))
        self.info = {}
        self.tasks = {}
        from worldtune.data.video import probe

        self.episodes = []
        fps = None
        for i, v in enumerate(videos):
            txt = self.root / "metas" / f"{v.stem}.txt"
            task: str | None = None
            if txt.is_file():
                try:
                    task = txt.read_bytes().decode("utf-8").strip()
                except UnicodeDecodeError:
                    task = None
            try:
                vi = probe(v)
                length = vi.num_frames
                fps = fps or vi.fps
            except DatasetError:
                length = -1  # unreadable: the preparer counts it as a corrupt video
            self.episodes.append(Episode(i, length, [task], None, {PLAIN_CAMERA: VideoSpan(v)}))
        self.fps = fps
        self.has_success_flags = False
        self.cameras = {PLAIN_CAMERA: CameraFeature(PLAIN_CAMERA, None, None, fps, None)}
        self.names = {i: v.stem for i, v in enumerate(videos)}


# ------------------------------------------------------------------------------------- helpers
def _camera_features(info: dict, where: Path) -> dict[str, CameraFeature]:
    feats = info.get("features")
    if not isinstance(feats, dict):
        raise DatasetError(f"{where}: no 'features' mapping; is this a LeRobot dataset?")
    out = {}
    for key, f in feats.items():
        if not isinstance(f, dict) or f.get("dtype") != "video":
            continue
        h, w = _hw(f)
        vi = f.get("info") or f.get("video_info") or {}
        fps = vi.get("video.fps", vi.get("fps", info.get("fps")))
        codec = vi.get("video.codec", vi.get("codec"))
        h = h or vi.get("video.height")
        w = w or vi.get("video.width")
        what = f"features.{key}"
        out[key] = CameraFeature(key, _number(h, int, where, what + " height"), _number(w, int, where, what + " width"),
                                 _number(fps, float, where, what + " fps") or None, codec)
    return out


def _hw(feature: dict) -> tuple[int | None, int | None]:
    """Height, width from `shape`, going by `names` (HWC or CHW both occur)."""
    shape = feature.get("shape") or []
    names = [str(n).lower() for n in (feature.get("names") or [])]
    if len(shape) != 3:
        return None, None
    if "height" in names and "width" in names:
        return int(shape[names.index("height")]), int(shape[names.index("width")])
    if shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4):
        return int(shape[1]), int(shape[2])  # CHW
    return int(shape[0]), int(shape[1])


def _success_of(rec: dict) -> bool | None:
    for k in SUCCESS_KEYS:
        if rec.get(k) is not None:
            return bool(rec[k])
    return None


def _strings(col: pa.ChunkedArray) -> list[str | None]:
    """A string column decoded strictly: invalid UTF-8 becomes None (counted later, not a crash)."""
    try:
        raw = pc.cast(col, pa.large_binary()).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return [None] * len(col)
    out: list[str | None] = []
    for b in raw:
        try:
            out.append(None if b is None else b.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(None)
    return out


def _task_lists(col: pa.ChunkedArray) -> list[list[str | None]]:
    """A `tasks` column (list<string>, or a plain string) as lists of strictly decoded strings."""
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        out = []
        for chunk in col.chunks:
            offsets = chunk.offsets.to_pylist()
            flat = _strings(pa.chunked_array([chunk.flatten()])) if len(chunk) else []
            base = offsets[0] if offsets else 0
            for i in range(len(chunk)):
                out.append([] if not chunk[i].is_valid else flat[offsets[i] - base:offsets[i + 1] - base])
        return out
    return [[s] for s in _strings(col)]


def _number(value: Any, kind: type, where: str | Path, what: str) -> Any:
    """`kind(value)` for a metadata number (None stays None); anything else is a one-line DatasetError.

    Why: a hand-edited or converted dataset can carry "30fps" or a list where a number belongs,
    and the error must name the file and the field, not come from deep inside numpy or PyAV."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, bool) or isinstance(value, (list, dict)):
            raise TypeError
        x = kind(value)
        if kind is float and not math.isfinite(x) or x < 0:
            raise ValueError
        return x
    except (TypeError, ValueError, OverflowError):
        raise DatasetError(f"{where}: {what} = {value!r} is not a valid non-negative number; fix the dataset's "
                           "metadata") from None


def parquet_columns(path: Path, fix: str) -> list[str]:
    """The column names of a parquet file, or a one-line error naming the file and `fix`."""
    try:
        return pq.ParquetFile(path).schema_arrow.names
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{path} cannot be read as parquet ({_first_line(e)}): {fix}") from None


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:120] if str(e) else type(e).__name__


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{path} is not valid JSON ({e}): the dataset's metadata is damaged") from None


def _read_jsonl(path: Path) -> list[dict]:
    """JSON lines; a line with invalid UTF-8 keeps its record with unreadable strings as None."""
    out = []
    for n, raw in enumerate(path.read_bytes().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
            bad = False
        except UnicodeDecodeError:
            text, bad = raw.decode("utf-8", errors="replace"), True
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}:{n} is not valid JSON ({e.msg})") from None
        if bad:
            for k in ("tasks", "task"):
                if k in rec:
                    rec[k] = [None] if k == "tasks" else None
        out.append(rec)
    return out


def _read_parquet(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError, KeyError) as e:
        raise DatasetError(f"{path} cannot be read as parquet ({str(e).splitlines()[0][:120]})") from None

