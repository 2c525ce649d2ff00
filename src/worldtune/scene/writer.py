"""Writing the scene's episodes as a LeRobot dataset (v3.0 or v2.1), with the true cameras in meta/cameras.json.

Why apart from the episodes (worldtune.scene.episode): rendering an episode needs only the ray caster,
writing one needs the video encoder and parquet; the simulator and the success detector use the first only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from worldtune.atomic import atomic_write_bytes
from worldtune.data.video import VideoWriter
from worldtune.scene.episode import (ACTION_NAMES, CAMERA_NAMES, FEATURE_PREFIX, FPS, ROBOT_TYPE, ArmLook, SyntheticEpisode,
                                     demo_episodes)

# ------------------------------------------------------------------------------------- writing
def _features(height: int, width: int, version: str, codec: str) -> dict:
    vinfo = {"video.height": height, "video.width": width, "video.codec": "h264" if codec == "libx264" else codec,
             "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": FPS, "video.channels": 3,
             "has_audio": False}
    feats: dict = {}
    for name in CAMERA_NAMES:
        feats[FEATURE_PREFIX + name] = {"dtype": "video", "shape": [height, width, 3],
                                        "names": ["height", "width", "channels"], "info": vinfo}
    feats["observation.state"] = {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)}
    feats["action"] = {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)}
    feats["is_episode_successful"] = {"dtype": "bool", "shape": [1], "names": None}
    for k in ("timestamp",):
        feats[k] = {"dtype": "float32", "shape": [1], "names": None}
    for k in ("frame_index", "episode_index", "index", "task_index"):
        feats[k] = {"dtype": "int64", "shape": [1], "names": None}
    return feats


def _episode_table(ep: SyntheticEpisode, task_index: int, first_index: int) -> pa.Table:
    states = []
    for i in range(ep.length):
        g, opening, _ = ep.gripper(i)
        states.append([g[0], g[1], g[2], opening])
    st = np.asarray(states, np.float32)
    act = np.concatenate([st[1:], st[-1:]])
    n = ep.length
    return pa.table({
        "observation.state": pa.array(list(st), pa.list_(pa.float32())),
        "action": pa.array(list(act), pa.list_(pa.float32())),
        "is_episode_successful": pa.array([ep.success] * n),
        "timestamp": pa.array(np.arange(n, dtype=np.float32) / FPS),
        "frame_index": pa.array(np.arange(n, dtype=np.int64)),
        "episode_index": pa.array(np.full(n, ep.index, np.int64)),
        "index": pa.array(np.arange(first_index, first_index + n, dtype=np.int64)),
        "task_index": pa.array(np.full(n, task_index, np.int64)),
    })


def _write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def _write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())


def _cameras_json(eps: list[SyntheticEpisode]) -> dict:
    """Camera ground truth for meta/cameras.json (K, and R, t fixed or per frame per episode)."""
    e0 = eps[0]
    cams: dict = {}
    for name in CAMERA_NAMES:
        c0 = e0.camera(name, 0)
        entry = {"role": name, "K": c0.K.tolist(), "width": c0.width, "height": c0.height}
        if name == "wrist_left":
            entry["static"] = False
            entry["episodes"] = {
                str(e.index): {"R": [e.camera(name, i).R.tolist() for i in range(e.length)],
                               "t": [e.camera(name, i).t.tolist() for i in range(e.length)]} for e in eps}
        elif any(e.style == "hard" or e.rig_jitter for e in eps):  # re-placed every episode, fixed within one
            entry["static"] = True
            entry["episodes"] = {str(e.index): {"R": e.camera(name, 0).R.tolist(), "t": e.camera(name, 0).t.tolist()}
                                 for e in eps}
        else:
            entry.update(static=True, R=c0.R.tolist(), t=c0.t.tolist())
        cams[FEATURE_PREFIX + name] = entry
    return {"format": "worldtune.cameras", "version": 1, "fps": FPS,
            "convention": "x_cam = R @ x_world + t; [u, v, 1] ~ K @ x_cam; OpenCV axes (x right, y down, "
                          "z forward); pixel centres at integer coordinates; R, t given once (a rig fixed "
                          "for the whole dataset), per episode (`episodes`: {index: {R, t}}), or per frame "
                          "(`episodes`: {index: {R: [...], t: [...]}} indexed by frame within the episode)",
            "cameras": cams}


SCENE_JSON = "scene.json"  # meta/scene.json: each episode's task and its block's true path


def scene_json(eps: list[SyntheticEpisode]) -> dict:
    """The scene's truth an evaluation of task success needs (meta/scene.json): per episode its task, the block it
    moves and that block's centre in every frame (m, world frame), so a generated clip can be checked against where
    the real episode put the block (worldtune.eval.task_success)."""
    return {"format": "worldtune.scene", "version": 1, "fps": FPS,
            "episodes": {str(e.index): {"task": e.task, "target": e.target, "place_on": e.place_on,
                                        "target_path": [[round(float(v), 5) for v in e.block_position(e.target, i)]
                                                        for i in range(e.length)]} for e in eps}}


def write_demo_dataset(root: str | Path, episodes: int = 14, seed: int = 0,
                       version: Literal["v3.0", "v2.1"] = "v3.0", height: int = 96, width: int = 160,
                       episodes_per_file: int | None = None, failed: tuple[int, ...] = (),
                       codec: str = "libx264", crf: int = 20, preset: str = "veryfast",
                       workers: int = 2, style: Literal["demo", "hard"] = "demo",
                       length: int | None = None, targets: tuple[str, ...] = (), rig_jitter: float = 0.0,
                       texture_seed: int | None = None, motion: Literal["scripted", "varied"] = "scripted",
                       place_on: str = "bowl", layout_of: int | None = None, arm: ArmLook = "grey") -> Path:
    """Render the tabletop demo and write it as a LeRobot v3.0 (default) or v2.1 dataset.

    v3.0: episodes are concatenated, `episodes_per_file` per mp4/parquet file (None = all in one).
    `failed` episode indices get `is_episode_successful = False` (the arm misses the grasp).
    `style` "hard" renders the low-texture, wide-baseline scene; `length` fixes every episode's
    length; `motion` "varied" draws each episode's path; `place_on` is where the block goes (the bowl or
    another block); `layout_of` gives every episode one episode's layout and start (only the paths differ);
    `arm` "bold" draws a near-black, thicker arm.
    Returns the dataset root. Writes `meta/cameras.json` with the true cameras and `meta/scene.json` with each
    episode's task and its block's path. Episodes are rendered in `workers` processes (the
    default 14 episodes at 96x160 take a few seconds).
    """
    root = Path(root)
    eps = demo_episodes(episodes, seed, height, width, failed, style, length, targets, rig_jitter, texture_seed,
                        motion, place_on, layout_of, arm)
    tasks: dict[str, int] = {}
    for e in eps:
        tasks.setdefault(e.task, len(tasks))
    per_file = episodes_per_file or max(1, len(eps))
    info = {
        "codebase_version": version, "robot_type": ROBOT_TYPE,
        "total_episodes": len(eps), "total_frames": sum(e.length for e in eps), "total_tasks": len(tasks),
        "chunks_size": 1000, "fps": FPS, "splits": {"train": f"0:{len(eps)}"},
        "features": _features(height, width, version, codec),
    }
    if version == "v3.0":
        info.update(data_files_size_in_mb=100, video_files_size_in_mb=500,
                    data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                    video_path="videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4")
        _write_v3(root, eps, tasks, per_file, codec, crf, preset, workers)
    elif version == "v2.1":
        info.update(total_chunks=1, total_videos=len(eps) * len(CAMERA_NAMES),
                    data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
                    video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
        _write_v21(root, eps, tasks, codec, crf, preset, workers)
    else:
        raise ValueError(f"version must be 'v3.0' or 'v2.1', got {version!r}")
    _write_json(root / "meta" / "cameras.json", _cameras_json(eps))
    _write_json(root / "meta" / SCENE_JSON, scene_json(eps))
    _write_json(root / "meta" / "info.json", info)
    return root


def _render_episode(e: SyntheticEpisode) -> list[dict[str, np.ndarray]]:
    return [e.render(i) for i in range(e.length)]


def _rendered(eps: list[SyntheticEpisode], workers: int) -> Iterator[tuple[SyntheticEpisode, list]]:
    """(episode, frames) in order, rendered in worker processes when workers > 1."""
    if workers <= 1 or len(eps) <= 1:
        for e in eps:
            yield e, _render_episode(e)
        return
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(min(workers, len(eps))) as pool:
        yield from zip(eps, pool.imap(_render_episode, eps))


def _write_v3(root: Path, eps: list[SyntheticEpisode], tasks: dict[str, int], per_file: int,
              codec: str, crf: int, preset: str, workers: int) -> None:
    rows: list[dict] = []
    index = 0
    frames_of = _rendered(eps, workers)
    for f, start in enumerate(range(0, len(eps), per_file)):
        group = eps[start:start + per_file]
        writers = {n: VideoWriter(root / "videos" / (FEATURE_PREFIX + n) / "chunk-000" / f"file-{f:03d}.mp4",
                                  FPS, codec=codec, crf=crf, preset=preset, gop=FPS) for n in CAMERA_NAMES}
        tables = []
        offset = 0
        try:
            for _ in group:
                e, frames = next(frames_of)
                for views in frames:
                    for n, img in views.items():
                        writers[n].write(img)
                tables.append(_episode_table(e, tasks[e.task], index))
                row = {"episode_index": e.index, "tasks": [e.task], "length": e.length,
                       "dataset_from_index": index, "dataset_to_index": index + e.length,
                       "data/chunk_index": 0, "data/file_index": f,
                       "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
                for n in CAMERA_NAMES:
                    k = f"videos/{FEATURE_PREFIX}{n}/"
                    row.update({k + "chunk_index": 0, k + "file_index": f,
                                k + "from_timestamp": offset / FPS, k + "to_timestamp": (offset + e.length) / FPS})
                rows.append(row)
                offset += e.length
                index += e.length
            for w in writers.values():
                w.close()
        except BaseException:
            for w in writers.values():
                w.abort()
            raise
        _write_parquet(root / "data" / "chunk-000" / f"file-{f:03d}.parquet", pa.concat_tables(tables))
    _write_parquet(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet", pa.Table.from_pylist(rows))
    _write_parquet(root / "meta" / "tasks.parquet",
                   pa.table({"task_index": list(tasks.values()), "task": list(tasks.keys())}))


def _write_v21(root: Path, eps: list[SyntheticEpisode], tasks: dict[str, int], codec: str, crf: int,
               preset: str, workers: int) -> None:
    index = 0
    lines = []
    for e, frames in _rendered(eps, workers):
        for n in CAMERA_NAMES:
            with VideoWriter(root / "videos" / "chunk-000" / (FEATURE_PREFIX + n) / f"episode_{e.index:06d}.mp4",
                             FPS, codec=codec, crf=crf, preset=preset) as w:
                for fr in frames:
                    w.write(fr[n])
        _write_parquet(root / "data" / "chunk-000" / f"episode_{e.index:06d}.parquet",
                       _episode_table(e, tasks[e.task], index))
        index += e.length
        lines.append(json.dumps({"episode_index": e.index, "tasks": [e.task], "length": e.length}))
    atomic_write_bytes(root / "meta" / "episodes.jsonl", ("\n".join(lines) + "\n").encode())
    atomic_write_bytes(root / "meta" / "tasks.jsonl", "".join(
        json.dumps({"task_index": i, "task": t}) + "\n" for t, i in tasks.items()).encode())
