"""`worldtune prepare`: a LeRobot (v2.x/v3) or plain video dataset -> a folder of training clips.

Output (docs/data.md): `info.json` (format "worldtune.dataset", version 1, layout, sizes, counts),
`manifest.parquet` (one row per clip), `clips/*.mp4`, `report.json` + `report.md` + a length
histogram, and `cameras.json` when the source has `meta/cameras.json`.

How it stays correct when killed: every clip mp4 is written atomically; as soon as all clips of
an episode are written (in whichever worker), the main process writes its done-record
`.progress/episode_NNNNNN.json` (atomically) with their manifest rows, so a kill -9 at any point
loses at most the episodes in flight. A rerun skips episodes with a record and rewrites the
others (same clip names, so no duplicates). The manifest is rebuilt from the records at the end.
The settings that shape clips are fingerprinted in `.progress/settings.json` (after the encoder
settings were tried, so a typo cannot poison the folder): rerunning into the same folder with
other settings is an error, not a mix. Which episodes are held out (`val_fraction`, `seed`) is
decided at manifest time, so changing it needs no re-encoding. One run at a time per folder
(`OutputLock`).

Bad input never stops the run: an episode with a corrupt/truncated video, a missing camera,
cameras that disagree in fps or frame count, no frames, or (with `missing_task = "skip"`) no
usable task is skipped and counted by reason. A drop for a source video remembers the file's size
and modification time: when the file changes (a repaired download), the episode is retried. The
output side failing (disk full, quota, I/O error) is never a drop: it stops the run with a
one-line error, and the rerun resumes.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import os
import re
import signal
import statistics
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from worldtune.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text, remove_stale_temps
from worldtune.config import PrepareConfig
from worldtune.console import setting_up
from worldtune.data import actions as action_data
from worldtune.data.frame_size import check_frame_size, size_steps
from worldtune.data.layout import GridLayout, Layout, SeparateLayout, SingleLayout, fit_i420, i420_exact, \
    layout_from_dict
from worldtune.data.lerobot import Episode, LeRobotDataset, VideoSpan
from worldtune.data.video import VideoWriter, check_encoder, i420_frame, probe, read_frames
from worldtune.errors import ConfigError, DatasetError, WorldtuneError
from worldtune.lock import OutputLock

FORMAT = "worldtune.dataset"
VERSION = 1
PROMPT_PRESETS: dict[str, str] = {
    "droid_grid": (
        "A multi-view video shows that a robot {task} The video is split into four views: The top-left "
        "view shows the robotic arm from the left side, the top-right view shows it from the right side, "
        "the bottom-left view shows a first-person perspective from the robot's end-effector (gripper), "
        "and the bottom-right view is a black screen (inactive view). The robot {task}"
    ),
    "gr1": "The robot arm is performing a task. {task}",
    "plain": "{task}",
}
GRID_PROMPTS = ("droid_grid",)  # presets that describe a 2x2 grid of cameras
DROP_REASONS = ("empty_episode", "too_short", "missing_task", "unsuccessful", "unknown_success", "missing_camera",
                "corrupt_video", "truncated_video", "fps_mismatch", "frame_count_mismatch",
                *action_data.DROP_REASONS)
PROGRESS = ".progress"
# settings that change what a clip contains: a rerun with other values must not reuse clips
_CLIP_SETTINGS = ("cameras", "layout", "grid", "num_frames", "stride", "clip_policy", "overlap", "height",
                  "width", "fps", "resize", "prompt_template", "missing_task", "fallback_task", "codec", "crf",
                  "preset")
ClipHook = Callable[[str], None]


# ------------------------------------------------------------------------------------ planning
def prompt_template(cfg: PrepareConfig) -> str:
    """The template string: a preset by name, or the config's own text containing {task}."""
    t = PROMPT_PRESETS.get(cfg.prompt_template, cfg.prompt_template)
    if "{task}" not in t:
        raise ConfigError(f"prepare.prompt_template {cfg.prompt_template!r} is neither a preset "
                          f"({', '.join(PROMPT_PRESETS)}) nor a text containing {{task}}")
    return t


def describes_grid(template: str) -> bool:
    """True for a prompt preset (by name or text) that describes cameras tiled in a grid."""
    return template in GRID_PROMPTS or template in (PROMPT_PRESETS[n] for n in GRID_PROMPTS)


def clean_task(text: str | None) -> str | None:
    """Whitespace-normalised task text ending in punctuation; None if empty or not valid UTF-8."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a bad decode
        return None
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return None
    return text if text[-1] in ".!?" else text + "."


def build_layout(cfg: PrepareConfig) -> Layout:
    """The layout the config asks for; a size no later step can use is refused here, before any work."""
    roles = list(cfg.cameras)
    if not roles:
        raise ConfigError("prepare.cameras is empty: map at least one role to a camera feature key")
    if cfg.layout == "grid":
        unknown = [r for r in cfg.grid.cells if r not in cfg.cameras]
        if unknown:
            raise ConfigError(f"prepare.grid.cells names roles {unknown} that prepare.cameras does not map")
        rows, cols = cfg.grid.rows, cfg.grid.cols
        if rows < 1 or cols < 1:
            raise ConfigError(f"prepare.grid must have at least one row and column, got {rows}x{cols}")
        check_frame_size(cfg.height, cfg.width, size_steps(2, rows, cols),
                         f"prepare.height/width {cfg.height}x{cfg.width} does not split into {rows}x{cols} grid cells "
                         "of even size (yuv420p video stores colour at half resolution)")
        return GridLayout(rows, cols, dict(cfg.grid.cells), cfg.height, cfg.width, cfg.resize)
    check_frame_size(cfg.height, cfg.width, size_steps(2),
                     f"prepare.height/width {cfg.height}x{cfg.width} is not even (yuv420p video)")
    if cfg.layout == "separate":
        return SeparateLayout(roles, cfg.height, cfg.width, cfg.resize)
    if len(roles) != 1:
        raise ConfigError(f"prepare.layout = 'single' needs exactly one camera in prepare.cameras, got {roles}")
    return SingleLayout(roles[0], cfg.height, cfg.width, cfg.resize)


def frames_needed(num_frames: int, stride: int) -> int:
    """Source frames a window of `num_frames` at `stride` spans: (F-1)*s+1."""
    return (num_frames - 1) * stride + 1


def window_starts(length: int, cfg: PrepareConfig) -> list[int]:
    """First source frame of each clip of an episode (episode policy: one clip from frame 0)."""
    need = frames_needed(cfg.num_frames, cfg.stride)
    if length < need:
        return []
    if cfg.clip_policy == "episode":
        return [0]
    step = (cfg.num_frames - cfg.overlap) * cfg.stride
    return list(range(0, length - need + 1, step))


@dataclass
class EpisodeJob:
    """Everything a worker needs for one episode (picklable; no dataset object)."""

    episode_index: int
    length: int
    task: str
    prompt: str
    spans: dict[str, VideoSpan]  # role -> span
    starts: list[int]
    fps: float | None  # the dataset's fps, for the fps check


@dataclass
class Plan:
    jobs: list[EpisodeJob] = field(default_factory=list)
    dropped: dict[int, str] = field(default_factory=dict)  # episode -> reason
    lengths: list[int] = field(default_factory=list)


def plan_episodes(ds: LeRobotDataset, cfg: PrepareConfig, template: str) -> Plan:
    """Metadata-level checks (no decoding): which episodes to process, which to drop and why."""
    plan = Plan()
    eps = ds.episodes[: cfg.max_episodes] if cfg.max_episodes else ds.episodes
    fallback = clean_task(cfg.fallback_task) or "performs a task."
    for ep in eps:
        plan.lengths.append(max(0, ep.length))
        reason, task = _episode_reason(ep, cfg, ds.has_success_flags)
        if reason is None and task is None:
            if cfg.missing_task == "skip":
                reason = "missing_task"
            task = fallback
        if reason:
            plan.dropped[ep.index] = reason
            continue
        spans = {role: ep.spans[key] for role, key in cfg.cameras.items()}
        plan.jobs.append(EpisodeJob(ep.index, ep.length, task, template.replace("{task}", task), spans,
                                    window_starts(ep.length, cfg), ds.fps))
    return plan


def _drop_without_actions(plan: Plan, actions: action_data.ActionSource) -> None:
    """Episodes whose actions are missing or not finite are dropped (counted) before any video work."""
    keep = []
    for job in plan.jobs:
        reason = actions.drop_reason(job.episode_index, job.length)
        if reason:
            plan.dropped[job.episode_index] = reason
        else:
            keep.append(job)
    plan.jobs = keep


def _episode_reason(ep: Episode, cfg: PrepareConfig, has_flags: bool) -> tuple[str | None, str | None]:
    if ep.length < 0:
        return "corrupt_video", None
    if ep.length == 0:
        return "empty_episode", None
    if cfg.only_successful and ep.success is False:
        return "unsuccessful", None
    if cfg.only_successful and has_flags and ep.success is None:  # its flags sit in an unreadable file
        return "unknown_success", None
    if any(key not in ep.spans for key in cfg.cameras.values()):
        return "missing_camera", None
    if not window_starts(ep.length, cfg):
        return "too_short", None
    return None, clean_task(ep.task)


def assign_splits(episodes: list[int], val_fraction: float, seed: int) -> dict[int, str]:
    """Hold out ceil(val_fraction * n) episodes (at least 1 when asked, never all), by a seeded hash.

    Each episode's rank depends only on (seed, episode index), so the held-out set is stable when
    episodes are added or the run is resumed.
    """
    ranked = sorted(episodes, key=lambda e: split_rank(seed, e))
    val = set(ranked[:val_count(len(episodes), val_fraction)])
    return {e: ("val" if e in val else "train") for e in episodes}


def val_count(n: int, val_fraction: float) -> int:
    """How many of n kept episodes are held out (never more as n shrinks: it grows with n)."""
    if val_fraction > 0 and n > 1:
        return min(n - 1, max(1, math.ceil(val_fraction * n - 1e-9)))
    return 0


def split_rank(seed: int, episode: int) -> str:
    """An episode's place in the hold-out order: the first `val_count` kept episodes are val."""
    return hashlib.sha1(f"{seed}:{episode}".encode()).hexdigest()


# -------------------------------------------------------------------------------------- worker
@dataclass
class WorkerSettings:
    out: str
    layout: dict
    num_frames: int
    stride: int
    fps: float | None
    codec: str
    crf: int
    preset: str
    threads: int
    source: str
    cameras: dict[str, str]
    on_clip: ClipHook | None = None


def clip_id(episode: int, start: int) -> str:
    return f"ep{episode:06d}_f{start:06d}"


def process_episode(job: EpisodeJob, ws: WorkerSettings) -> dict:
    """Check, decode and pack one episode's clips. Returns {"episode_index", "rows"} or a drop reason.

    Frames stay yuv420p from decoder to encoder: each needed frame's Y/U/V planes are resized once
    to the cell (or view) size and tiled as they are. A camera whose fit would not land on whole
    chroma pixels (odd sizes or offsets) is resized in RGB and converted once, as the encoder would.
    """
    import cv2

    cv2.setNumThreads(1)
    base = {"episode_index": job.episode_index, "rows": [], "dropped": None, "detail": None,
            "sources": source_fingerprint(job)}
    reason, detail, fps, sizes = _check_cameras(job)
    if reason:
        return {**base, "dropped": reason, "detail": detail}
    layout = layout_from_dict(ws.layout)
    ch, cw = layout.cell_size()  # a grid cell, or the whole frame of one camera
    idx = sorted({s + k * ws.stride for s in job.starts for k in range(ws.num_frames)})
    frames: dict[str, dict[int, np.ndarray]] = {}
    for role, span in job.spans.items():
        planes = i420_exact(sizes[role], ch, cw, layout.resize)
        try:
            arr = read_frames(span.path, idx, span.start_time, span.end_time,
                              pixel_format="yuv420p" if planes else "rgb24", threads=1)
        except DatasetError as e:
            return {**base, "dropped": "truncated_video" if "truncated" in str(e) else "corrupt_video", "detail": str(e)}
        # each needed frame resized once, also when sliding windows share it
        frames[role] = dict(zip(idx, fit_i420(arr, planes, ch, cw, layout.resize)))
    out_fps = ws.fps or fps / ws.stride
    out = Path(ws.out)
    rows = []
    for s in job.starts:
        cid = clip_id(job.episode_index, s)
        sel = [s + k * ws.stride for k in range(ws.num_frames)]
        video, view_paths = None, None
        if isinstance(layout, SeparateLayout):
            view_paths = {role: f"clips/{cid}/{role}.mp4" for role in layout.roles}
            for role, rel in view_paths.items():
                _write(out / rel, (frames[role][i] for i in sel), out_fps, ws)
        else:
            video = f"clips/{cid}.mp4"
            clip = ((_grid_frame(layout, frames, i) for i in sel) if isinstance(layout, GridLayout)
                    else (frames[layout.role][i] for i in sel))
            _write(out / video, clip, out_fps, ws)
        if ws.on_clip is not None:
            ws.on_clip(cid)
        h, w = layout.cell_size() if isinstance(layout, (SeparateLayout, SingleLayout)) else (layout.height, layout.width)
        rows.append({
            "clip_id": cid, "video": video, "views": json.dumps(view_paths) if view_paths else None,
            "source": ws.source, "episode_index": job.episode_index, "start_frame": s,
            "end_frame": s + frames_needed(ws.num_frames, ws.stride), "stride": ws.stride,
            "num_frames": ws.num_frames, "fps": float(out_fps), "height": int(h), "width": int(w),
            "task": job.task, "prompt": job.prompt, "cameras": list(job.spans),
        })
    return {**base, "rows": rows}


def source_fingerprint(job: EpisodeJob) -> dict[str, list[int]]:
    """Size and modification time of each source video of an episode: a drop is a verdict on these."""
    out = {}
    for span in job.spans.values():
        try:
            st = os.stat(span.path)
            out[str(span.path)] = [st.st_size, st.st_mtime_ns]
        except OSError:
            out[str(span.path)] = [-1, -1]
    return out


def _grid_frame(layout: GridLayout, frames: dict[str, dict[int, np.ndarray]], i: int):
    """Source frame i of every camera tiled straight into a new encoder frame."""
    vf, planes = i420_frame(layout.height, layout.width)
    layout.tile_i420({role: by_index[i] for role, by_index in frames.items()}, planes)
    return vf


def _write(path: Path, frames: Iterable, fps: float, ws: WorkerSettings) -> None:
    with VideoWriter(path, fps, codec=ws.codec, crf=ws.crf, preset=ws.preset, threads=ws.threads,
                     input_format="yuv420p") as w:
        for f in frames:
            w.write(f)


def _check_cameras(job: EpisodeJob) -> tuple[str | None, str | None, float, dict[str, tuple[int, int]]]:
    """Header-level checks of every camera of an episode: readable, same fps, same frame count.

    Returns (drop reason, detail, fps, {role: (height, width)})."""
    counts, rates, sizes = {}, {}, {}
    for role, span in job.spans.items():
        try:
            info = probe(span.path)
        except DatasetError as e:
            return "corrupt_video", str(e), 0.0, sizes
        rates[role] = info.fps
        sizes[role] = (info.height, info.width)
        if span.start_time is None:
            counts[role] = info.num_frames
        else:
            end = span.end_time if span.end_time is not None else info.duration
            if info.duration > 0:
                end = min(end, info.duration)
            counts[role] = int(round((end - span.start_time) * info.fps))
    fps = next(iter(rates.values()))
    if max(rates.values()) - min(rates.values()) > 1e-3 * fps or fps <= 0:
        return "fps_mismatch", f"episode {job.episode_index}: camera fps {rates}", fps, sizes
    if max(counts.values()) - min(counts.values()) > 1:
        short = min(counts.values())
        if short < job.length - 1:
            detail = f"episode {job.episode_index}: frames per camera {counts}, episode length {job.length}"
            return "truncated_video", detail, fps, sizes
        return "frame_count_mismatch", f"episode {job.episode_index}: frames per camera {counts}", fps, sizes
    return None, None, fps, sizes


# ---------------------------------------------------------------------------------------- run
class EpisodeSink(Protocol):
    """Takes each finished episode in the main process (`worldtune prepare --cache` encodes it)."""

    def has(self, row: dict) -> bool:
        """The clip is stored elsewhere: a done-record stays valid without its mp4s."""

    def begin(self, jobs: list[EpisodeJob], records: dict[int, dict]) -> None:
        """Called once, after planning, with the done-records of earlier runs."""

    def take(self, rec: dict) -> None:
        """Called for each finished episode before its done-record is written."""


def run(cfg: PrepareConfig, *, on_clip: ClipHook | None = None, quiet: bool = False,
        sink: EpisodeSink | None = None) -> dict:
    """Prepare `cfg.source` into `cfg.out`; resumable. Returns the report dict.

    `on_clip(clip_id)` is called after each clip file is written (tests use it to simulate a
    kill; with workers > 1 it runs in the worker process and must be picklable). `sink` takes
    every finished episode (see `EpisodeSink`).
    """
    cfg = getattr(cfg, "prepare", cfg)  # accept the whole WorldtuneConfig too
    t0 = time.perf_counter()
    template = prompt_template(cfg)
    if cfg.layout != "grid" and describes_grid(cfg.prompt_template):
        raise ConfigError(f"prepare.prompt_template={cfg.prompt_template!r} describes a 2x2 camera grid but "
                          f"prepare.layout={cfg.layout!r}: set prepare.prompt_template (plain, gr1, or a text with {{task}})")
    if cfg.clip_policy == "sliding" and not 0 <= cfg.overlap < cfg.num_frames:
        raise ConfigError(f"prepare.overlap must be in [0, num_frames), got {cfg.overlap}")
    if cfg.stride < 1:
        raise ConfigError(f"prepare.stride must be >= 1, got {cfg.stride}")
    layout = build_layout(cfg)
    check_encoder(cfg.codec, cfg.crf, cfg.preset, what="prepare.codec/crf/preset")
    ds = LeRobotDataset(cfg.source)
    missing = [f"{r}={k}" for r, k in cfg.cameras.items() if k not in ds.cameras]
    if missing:
        hint = ("; a plain videos/ + metas/ folder: prepare.cameras = {video = \"video\"}, "
                "prepare.layout = \"single\"" if ds.version == "plain" else "")
        raise DatasetError(f"{ds.root}: no camera feature {', '.join(missing)}; the dataset has "
                           f"{', '.join(ds.cameras) or 'none'} (set prepare.cameras{hint})")
    actions = action_data.ActionSource(ds, cfg.actions) if cfg.actions.key else None
    out = Path(cfg.out)
    with OutputLock(out, "prepare"), _StopOnSigterm() as stop:
        _start_output(out, cfg)
        with setting_up("prepare", f"planning clips of {ds.root}", enabled=not quiet):
            plan = plan_episodes(ds, cfg, template)
        if actions is not None:
            _drop_without_actions(plan, actions)
        records = _load_records(out, {j.episode_index: j for j in plan.jobs}, sink.has if sink else None)
        todo = [j for j in plan.jobs if j.episode_index not in records]
        if sink is not None:
            sink.begin(plan.jobs, records)
        ws = WorkerSettings(str(out), layout.to_dict(), cfg.num_frames, cfg.stride, cfg.fps, cfg.codec, cfg.crf,
                            cfg.preset, 1, str(ds.root), dict(cfg.cameras), on_clip)  # 1 thread: same bytes anywhere
        for rec in _run_jobs(todo, ws, cfg.workers, quiet, stop):
            if sink is not None:
                sink.take(rec)
            atomic_write_json(out / PROGRESS / f"episode_{rec['episode_index']:06d}.json", rec, indent=None)
            records[rec["episode_index"]] = rec
        report = _finish(out, cfg, ds, layout, plan, records, time.perf_counter() - t0,
                         resumed=len(plan.jobs) - len(todo), actions=actions)
    if not quiet:
        print_summary(report)
    if report["counts"]["clips"] == 0:
        if not quiet:
            print_stride_table(report)
        raise DatasetError(no_clips_message(report, cfg))
    return report


class Stopped(WorldtuneError):
    """SIGTERM (a scheduler, `kill`): workers are stopped; finished episodes are kept for the rerun."""


class _StopOnSigterm:
    """SIGTERM ends the run with `Stopped`; every episode already handed back is recorded first.

    Outside a worker pool the signal raises at once. While workers run it is only noted: the pool loop
    records the episodes that came back before it stops the workers, since raising in the middle of that
    loop would drop results that had arrived but were not yet written down.
    """

    MESSAGE = "prepare stopped by SIGTERM: finished episodes are kept; rerun the same command to continue"

    def __init__(self) -> None:
        self.requested = False
        self.deferred = False

    def __enter__(self) -> _StopOnSigterm:
        import threading

        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def _on_signal(self, signum, _frame) -> None:
        self.requested = True
        if not self.deferred:
            raise Stopped(self.MESSAGE)

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def no_clips_message(report: dict, cfg: PrepareConfig) -> str:
    """One line for a run that kept nothing: why, and what to change."""
    c = report["counts"]
    why = ", ".join(f"{k} {v}" for k, v in c["dropped"].items()) or "no episodes"
    return (f"{report['source']}: prepare kept 0 clips of {c['episodes_read']} episodes (dropped: {why}); clips of "
            f"{cfg.num_frames} frames at stride {cfg.stride} need {report['frames_needed']} source frames and the "
            f"longest episode has {report['lengths']['max']}: lower prepare.stride or prepare.num_frames "
            f"(episodes long enough by stride: above and in {Path(cfg.out) / 'report.md'})")


def _start_output(out: Path, cfg: PrepareConfig) -> None:
    """Create the folder, refuse a folder prepared with other clip settings, drop stale temp files."""
    settings = {k: v for k, v in cfg.model_dump(mode="json").items() if k in _CLIP_SETTINGS}
    settings["source"] = str(Path(cfg.source).resolve())
    path = out / PROGRESS / "settings.json"
    if path.is_file():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            raise DatasetError(f"{path} is damaged: the clips' settings are unknown; delete {out} or choose "
                               "another prepare.out") from None
        changed = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
        if changed:
            raise DatasetError(f"{out} holds clips prepared with other settings ({', '.join(changed)} changed): "
                               "choose another prepare.out or delete the folder")
    elif (out / "manifest.parquet").exists() and not (out / PROGRESS).is_dir():
        raise DatasetError(f"{out} holds a prepared dataset without progress records: choose another prepare.out")
    atomic_write_json(path, settings, sort_keys=True)
    remove_stale_temps(out, recursive=True)  # we hold the folder's lock: no live writer owns them


def _load_records(out: Path, wanted: dict[int, EpisodeJob],
                  stored: Callable[[dict], bool] | None = None) -> dict[int, dict]:
    """Done-records of earlier runs that still hold: every clip file exists (or `stored` has the clip),
    and a drop's sources are unchanged.

    A drop is a verdict on the source files it read; if one changed since (a download finished or
    was repaired) the episode is tried again. Records without source fingerprints are retried too.
    """
    recs: dict[int, dict] = {}
    for p in (out / PROGRESS).glob("episode_*.json"):
        try:
            rec = json.loads(p.read_text())
            e = rec["episode_index"]
            if e not in wanted:
                continue
            if rec["dropped"]:
                if rec.get("sources") != source_fingerprint(wanted[e]):
                    continue
            elif not all(_clip_files_exist(out, r) or (stored is not None and stored(r)) for r in rec["rows"]):
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable record: redo the episode
        recs[e] = rec
    return recs


def clip_files(row: dict) -> list[str]:
    """The mp4s of one manifest row, relative to the dataset folder (one packed video, or one per view)."""
    return [row["video"]] if row.get("video") else list(json.loads(row["views"]).values()) if row.get("views") else []


def _clip_files_exist(out: Path, row: dict) -> bool:
    return all((out / f).is_file() for f in clip_files(row))


def _run_jobs(jobs: list[EpisodeJob], ws: WorkerSettings, workers: int, quiet: bool, stop: _StopOnSigterm):
    """Process episodes in `workers` processes (1 = in this process) under a progress bar."""
    from worldtune.console import Progress

    with Progress("prepare", len(jobs), "episodes", enabled=not quiet and bool(jobs)) as progress:
        if workers <= 1 or len(jobs) <= 1:
            for job in jobs:
                yield _guard(process_episode, job, ws)
                progress.advance()
            return
        import multiprocessing as mp

        pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn"))
        stop.deferred = True
        try:
            # at most 2 episodes a worker in flight: the workers stay busy, yet write no further ahead of the
            # main process than that (with `prepare --cache` the VAE there may be slower than the workers)
            queue, pending = iter(jobs), set()
            while True:
                if not stop.requested:
                    pending |= {pool.submit(_guard, process_episode, j, ws)
                                for j in itertools.islice(queue, 2 * workers - len(pending))}
                if not pending:
                    break
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                if stop.requested:  # whatever came back by now is recorded; the rest is redone by the rerun
                    done |= {f for f in pending if f.done()}
                for fut in done:  # each episode is handed back (and recorded) as it finishes
                    yield fut.result()
                    progress.advance()
                if stop.requested:
                    raise Stopped(stop.MESSAGE)
        except BrokenProcessPool:
            raise WorldtuneError("a prepare worker process died (killed by the out-of-memory killer?): finished "
                                 "episodes are kept; rerun, with fewer prepare.workers if memory is short") from None
        finally:
            stop.deferred = False
            _stop_workers(pool)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel queued episodes and end running workers now (an interrupted run must not leave orphans).

    The executor has no public way to stop running workers before Python 3.14; its `_processes`
    map is read defensively. A clip being written is a temp file, removed by the next run.
    """
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=True, cancel_futures=True)


def _guard(fn, job: EpisodeJob, ws: WorkerSettings) -> dict:
    """Unexpected decoder trouble in one episode is a counted drop; the output side failing is not."""
    try:
        return fn(job, ws)
    except DatasetError as e:
        return {"episode_index": job.episode_index, "rows": [], "dropped": "corrupt_video", "detail": str(e),
                "sources": source_fingerprint(job)}


# ------------------------------------------------------------------------------------- outputs
_SCHEMA = pa.schema([
    ("clip_id", pa.string()), ("video", pa.string()), ("views", pa.string()), ("source", pa.string()),
    ("episode_index", pa.int64()), ("start_frame", pa.int64()), ("end_frame", pa.int64()),
    ("stride", pa.int64()), ("num_frames", pa.int64()), ("fps", pa.float64()), ("height", pa.int64()),
    ("width", pa.int64()), ("task", pa.string()), ("prompt", pa.string()), ("cameras", pa.list_(pa.string())),
    ("split", pa.string()),
])


def _finish(out: Path, cfg: PrepareConfig, ds: LeRobotDataset, layout: Layout, plan: Plan,
            records: dict[int, dict], seconds: float, resumed: int,
            actions: action_data.ActionSource | None = None) -> dict:
    dropped = dict(plan.dropped)
    rows: list[dict] = []
    for e in sorted(records):
        rec = records[e]
        if rec["dropped"]:
            dropped[e] = rec["dropped"]
        else:
            rows.extend(rec["rows"])
    kept = sorted({r["episode_index"] for r in rows})
    splits = assign_splits(kept, cfg.val_fraction, cfg.seed)
    for r in rows:
        r["split"] = splits[r["episode_index"]]
    rows.sort(key=lambda r: r["clip_id"])
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=_SCHEMA), sink)
    atomic_write_bytes(out / "manifest.parquet", sink.getvalue().to_pybytes())

    report = _report(cfg, ds, plan, dropped, rows, kept, splits, seconds, resumed)
    report["actions"] = actions.write(out, rows, splits) if actions is not None else None
    if actions is None:
        action_data.remove_index(out)
    src_cams = ds.root / "meta" / "cameras.json"
    if src_cams.is_file():
        atomic_write_bytes(out / "cameras.json", src_cams.read_bytes())
    fps = cfg.fps or (rows[0]["fps"] if rows else (ds.fps or 0) / cfg.stride)
    info = {
        "format": FORMAT, "version": VERSION, "layout": layout.to_dict(),
        "height": cfg.height, "width": cfg.width, "num_frames": cfg.num_frames, "fps": fps, "stride": cfg.stride,
        "cameras": dict(cfg.cameras),
        "source": {"path": str(ds.root.resolve()), "format": "lerobot" if ds.version != "plain" else "plain",
                   "version": ds.version, "fps": ds.fps},
        "source_sizes": {r: [ds.cameras[k].height, ds.cameras[k].width] for r, k in cfg.cameras.items()},
        "clip_policy": cfg.clip_policy, "overlap": cfg.overlap, "resize": cfg.resize,
        "prompt_template": prompt_template(cfg), "codec": cfg.codec, "crf": cfg.crf, "preset": cfg.preset,
        "has_cameras_json": src_cams.is_file(), "counts": report["counts"], "actions": report["actions"],
    }
    atomic_write_json(out / "info.json", info, indent=2)
    atomic_write_json(out / "report.json", report, indent=2)
    atomic_write_text(out / "report.md", _report_md(report))
    _histogram_png(out / "length_histogram.png", plan.lengths, frames_needed(cfg.num_frames, cfg.stride))
    return report


def _report(cfg: PrepareConfig, ds: LeRobotDataset, plan: Plan, dropped: dict[int, str], rows: list[dict],
            kept: list[int], splits: dict[int, str], seconds: float, resumed: int) -> dict:
    lengths = plan.lengths
    by_reason = {r: 0 for r in DROP_REASONS}
    for reason in dropped.values():
        by_reason[reason] = by_reason.get(reason, 0) + 1
    counts = {
        "episodes_read": len(lengths), "episodes_kept": len(kept),
        "train_episodes": sum(1 for e in kept if splits[e] == "train"),
        "val_episodes": sum(1 for e in kept if splits[e] == "val"),
        "clips": len(rows), "train_clips": sum(r["split"] == "train" for r in rows),
        "val_clips": sum(r["split"] == "val" for r in rows),
        "frames": len(rows) * cfg.num_frames,
        "dropped": {k: v for k, v in by_reason.items() if v}, "dropped_total": len(dropped),
    }
    edges = _hist_edges(lengths)
    hist = np.histogram(lengths, bins=edges)[0].tolist() if lengths else []
    details = {}
    for rec_e, reason in sorted(dropped.items()):
        details.setdefault(reason, []).append(rec_e)
    return {
        "source": str(ds.root), "source_version": ds.version, "out": cfg.out, "seconds": round(seconds, 3),
        "episodes_resumed": resumed, "counts": counts,
        "frames_needed": frames_needed(cfg.num_frames, cfg.stride), "num_frames": cfg.num_frames, "stride": cfg.stride,
        "lengths": {"min": min(lengths, default=0), "median": statistics.median(lengths) if lengths else 0,
                    "mean": round(statistics.fmean(lengths), 2) if lengths else 0, "max": max(lengths, default=0)},
        "length_histogram": {"edges": [float(x) for x in edges], "counts": hist},
        "episodes_kept_by_stride": {str(s): sum(1 for n in lengths if n >= frames_needed(cfg.num_frames, s))
                                    for s in range(1, 7)},
        "dropped_episodes": {k: v[:50] for k, v in details.items()},
    }


def _hist_edges(lengths: list[int]) -> list[float]:
    if not lengths:
        return [0.0, 1.0]
    lo, hi = min(lengths), max(lengths)
    return np.linspace(lo, hi + 1, min(20, max(2, hi - lo + 2))).tolist()


def _report_md(r: dict) -> str:
    c = r["counts"]
    lines = [
        "# worldtune prepare report", "",
        f"Source: `{r['source']}` (LeRobot {r['source_version']}), clips of {r['num_frames']} frames at stride "
        f"{r['stride']} (needs {r['frames_needed']} source frames).", "",
        "| | count |", "|---|---|",
        f"| episodes read | {c['episodes_read']} |", f"| episodes kept | {c['episodes_kept']} |",
        f"| clips (train / val) | {c['clips']} ({c['train_clips']} / {c['val_clips']}) |",
    ]
    lines += [f"| dropped: {k} | {v} |" for k, v in c["dropped"].items()]
    L = r["lengths"]
    lines += ["", f"Episode length: min {L['min']}, median {L['median']}, mean {L['mean']}, max {L['max']} frames.", "",
              "| stride | frames needed | episodes long enough |", "|---|---|---|"]
    for s, n in r["episodes_kept_by_stride"].items():
        lines.append(f"| {s} | {(r['num_frames'] - 1) * int(s) + 1} | {n} |")
    lines += ["", "![episode lengths](length_histogram.png)", ""]
    return "\n".join(lines)


def _histogram_png(path: Path, lengths: list[int], need: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    if lengths:
        ax.hist(lengths, bins=_hist_edges(lengths), color="#4c72b0")
    ax.axvline(need, color="#c44e52", linestyle="--", label=f"needed: {need}")
    ax.set_xlabel("episode length (frames)")
    ax.set_ylabel("episodes")
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def print_stride_table(report: dict) -> None:
    """Episodes long enough at each stride: what to choose when too few clips are kept."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"episodes long enough for {report['num_frames']}-frame clips, by stride")
    for col in ("stride", "frames needed", "episodes long enough"):
        t.add_column(col, justify="right")
    for stride, n in report["episodes_kept_by_stride"].items():
        t.add_row(stride, str((report["num_frames"] - 1) * int(stride) + 1), str(n))
    Console().print(t)


def print_summary(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    c = report["counts"]
    t = Table(title=f"worldtune prepare -> {report['out']}")
    t.add_column("")
    t.add_column("count", justify="right")
    t.add_row("episodes read", str(c["episodes_read"]))
    t.add_row("episodes kept (train / val)", f"{c['episodes_kept']} ({c['train_episodes']} / {c['val_episodes']})")
    t.add_row("clips (train / val)", f"{c['clips']} ({c['train_clips']} / {c['val_clips']})")
    for k, v in c["dropped"].items():
        t.add_row(f"dropped: {k}", str(v))
    if report["episodes_resumed"]:
        t.add_row("episodes done by an earlier run", str(report["episodes_resumed"]))
    t.add_row("seconds", f"{report['seconds']:.1f}")
    Console().print(t)
