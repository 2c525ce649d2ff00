"""Does each video do the task? The block the task moves, found in the video's last frames, against where the real
episode put it.

Why: pixel metrics and the gripper's track say how a video moves, not whether the block ends where the task puts
it, the first thing a robotics user asks of a world model. For worldtune's synthetic scene the answer is known
exactly: the dataset records every episode's task and the true path of the block it moves (`meta/scene.json`,
worldtune.scene.writer) and every camera (`cameras.json`). A clip of 17 frames often ends before the block is
placed (the arm may still hold it, or not have reached it), so "does the task" here means: **the block ends where
the real clip puts it**.

How, per input (one real clip and every video made from it):

- **the judged moment**: the latest of the clip's last `last` frames where the real clip itself shows the block at
  its true place (found by worldtune.scene.detector's colour blobs in the two exterior views, triangulated, within
  `tolerance` of the recorded centre). At the clip views' size (64x112 in the demo) a block lifted in the gripper can
  be hidden by the fingers; the moment is taken where the real clip shows it, the same for every video of the input.
  When the real clip shows it in none of those frames, the input is not judged (its videos say why) and the real
  clip counts as a miss: the real clips' rate is the check that the detector reads these views.
- **the verdict** of a video: the block is found at the judged frame (two exterior views) and its centre lies
  within `tolerance` of the true centre there. Not found is not done.
- **moved**: whether the true block at the judged moment is more than `tolerance` from where it starts. On inputs
  where it is not, holding the first frame does the task; the summary gives the rate on the moved inputs too.

Per model: inputs whose video does the task, k of n, with a 95 % Wilson interval (each input's first seed, so that n
counts inputs as the real clips' row does; `videos` counts every seed); and in how many of those videos the block
is found at its true place in the first frame (`seen_first`: a video whose decoder cannot draw the block's colour
cannot be read at all, and the baseline "real clip through the VAE" shows whether the model's VAE can: it bounds
what any video decoded by that VAE can score). Only datasets written by worldtune's scene carry the truth; for any
other the figure is absent and the reason says why (`TaskTruth.load`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from worldtune.eval.end_effector import _source_root
from worldtune.eval.rig import Calibration

METRIC = "task_done"  # per video: True / False, or None where the input could not be judged
SCENE_FILE = "scene.json"  # the scene's truth in the source dataset's meta/ (worldtune.scene.writer.SCENE_JSON)


@dataclass(frozen=True)
class TaskSettings:
    """How close counts as "where the real clip puts it", and which final frames may be judged."""

    tolerance: float = 0.04  # m between the block's centre found and its true centre (the blocks are 4-5 cm wide)
    last: int = 5  # the judged frame is one of the clip's last `last` frames
    min_area: int = 1  # pixels a colour blob needs at least (a block is ~4 px wide in a 64x112 view)


@dataclass
class ClipTruth:
    """One clip's block: its name, its true centre per clip frame (T, 3) m, and the exterior cameras per frame."""

    target: str
    task: str
    path: np.ndarray
    cameras: list[dict[str, Any]]  # per frame: {role: worldtune.scene.raycast.Camera in the clip view's pixels}


class TaskTruth:
    """The scene's truth behind a prepared synthetic-scene dataset: calibration and each episode's block path."""

    def __init__(self, cal: Calibration, episodes: dict[str, dict[str, Any]]) -> None:
        self.cal = cal
        self.episodes = episodes

    @classmethod
    def load(cls, dataset: str | Path | None) -> "TaskTruth | str":
        """The truth of a prepared dataset, or the reason (one line) it has none."""
        if dataset is None:
            return "no prepared dataset found (set evaluate.dataset, or generate from a prepared dataset)"
        root = Path(dataset)
        cal = Calibration.load(root)
        if cal is None:
            return f"{root} has no cameras.json: finding the block needs the dataset's cameras (worldtune's scene records them)"
        try:
            info = json.loads((root / "info.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            return f"{root / 'info.json'} unreadable ({e})"
        src = _source_root(root, str((info.get("source") or {}).get("path") or ""))
        path = None if src is None else src / "meta" / SCENE_FILE
        if path is None or not path.is_file():
            return (f"the source dataset of {root} has no meta/{SCENE_FILE}: only datasets written by worldtune's "
                    "synthetic scene record where each episode's block goes (rewrite it with this worldtune)")
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            episodes = {str(k): v for k, v in doc["episodes"].items()}
        except (OSError, ValueError, KeyError, AttributeError) as e:
            return f"{path} unreadable ({e}): rewrite the scene dataset"
        return cls(cal, episodes)

    def clip(self, clip: str) -> ClipTruth | None:
        """The truth of `clip` (None when the clip, its episode or two fixed exterior cameras are not known)."""
        from worldtune.scene.raycast import Camera

        row = self.cal.clips.get(clip)
        ep = None if row is None else self.episodes.get(str(int(row["episode_index"])))
        roles = [r for r in sorted(self.cal.roles) if self.cal.is_static(r) is True]
        if ep is None or len(roles) < 2:
            return None
        frames, start, stride = int(row["num_frames"]), int(row["start_frame"]), int(row["stride"])
        idx = [start + k * stride for k in range(frames)]
        full = np.asarray(ep["target_path"], np.float64)
        if max(idx) >= len(full):
            return None
        cams: list[dict[str, Any]] = []
        for k in range(frames):
            per = {}
            for role in roles:
                c = self.cal.camera(role, clip, k)
                if c is None:
                    return None
                h, w = self.cal.cell_size(role)
                per[role] = Camera(c[0], c[1], c[2], int(w), int(h))
            cams.append(per)
        return ClipTruth(str(ep["target"]), str(ep.get("task", "")), full[idx], cams)


def view_colours() -> dict[str, tuple[tuple[int, int], int, int]]:
    """The detector's colour ranges with the green block's widened (hue 40-95, saturation from 80, value from 25):
    in a 64x112 view the block is ~4 px wide, and a video codec's half-resolution colour blends it with what it stands
    on (on the blue cube it turns cyan, hue up to 92). Nothing else in the scene has those hues (the table stays under
    19, the blue cube from 100; the arm, floor and wall are grey)."""
    from worldtune.scene.detector import COLOURS

    return {**COLOURS, "green": ((40, 95), 80, 25)}


def locate(views: dict[str, np.ndarray], truth: ClipTruth, k: int, s: TaskSettings) -> np.ndarray | None:
    """The block's centre (m) at frame k of a video's views ({role: (T, h, w, 3) uint8}), or None when it is not
    found in two exterior views."""
    import cv2

    from worldtune.scene.detector import SuccessDetector
    from worldtune.scene.episode import camera_name

    cams = truth.cameras[k]
    frames = {}
    for role, cam in cams.items():
        if role not in views or k >= len(views[role]):
            return None
        f = views[role][k]
        if f.shape[:2] != (cam.height, cam.width):  # a video at another size: judged at the clip view's
            f = cv2.resize(f, (cam.width, cam.height), interpolation=cv2.INTER_AREA)
        frames[camera_name(role)] = np.ascontiguousarray(f)
    det = SuccessDetector({camera_name(r): c for r, c in cams.items()}, min_area=s.min_area, colours=view_colours())
    return det.locate(frames, [truth.target]).get(truth.target)


def judged_frame(real: dict[str, np.ndarray], truth: ClipTruth, s: TaskSettings) -> int | None:
    """The latest of the last `s.last` frames where the real clip shows the block at its true place, or None."""
    n = min(len(truth.path), *(len(v) for v in real.values()))
    for k in range(n - 1, max(0, n - s.last) - 1, -1):
        p = locate(real, truth, k, s)
        if p is not None and np.linalg.norm(p - truth.path[k]) <= s.tolerance:
            return k
    return None


def verdict(views: dict[str, np.ndarray], truth: ClipTruth, k: int, s: TaskSettings) -> dict[str, Any]:
    """A video's row fields at the judged frame k: done, the distance found, where, and why."""
    p = locate(views, truth, k, s)
    moved = bool(np.linalg.norm(truth.path[k] - truth.path[0]) > s.tolerance)
    first = locate(views, truth, 0, s)  # does the video draw the block where it starts? (a VAE may lose its colour)
    row: dict[str, Any] = {"task_frame": k, "task_moved": moved, "task_block": truth.target,
                           "task_seen_first": first is not None and bool(np.linalg.norm(first - truth.path[0]) <= s.tolerance)}
    if p is None:
        return {**row, METRIC: False, "task_error_cm": None,
                "task_reason": f"the {truth.target} block is not found in two exterior views at frame {k}"}
    d = float(np.linalg.norm(p - truth.path[k]))
    done = d <= s.tolerance
    return {**row, METRIC: bool(done), "task_error_cm": round(100 * d, 2), "task_position": [round(float(v), 4) for v in p],
            "task_reason": f"the {truth.target} block is {100 * d:.1f} cm from where the real clip puts it at frame {k} "
                           f"({'within' if done else 'beyond'} {100 * s.tolerance:.0f} cm)"}


def judge_input(real: tuple[str, Any], others: Sequence[tuple[str, Any]], truth: ClipTruth,
                s: TaskSettings = TaskSettings()) -> dict[str, dict[str, Any]]:
    """The real clip (`real`: key, VideoSource) and every other video of one input judged at the moment the real clip
    shows the block (module doc). Per key: row fields."""
    from worldtune.errors import WorldtuneError

    real_key, real_src = real
    try:
        real_views = real_src.load()
    except WorldtuneError as e:
        return {k: {METRIC: None, "task_reason": f"real clip unreadable: {e}"} for k, _ in [real, *others]}
    k = judged_frame(real_views, truth, s)
    if k is None:
        why = (f"the real clip does not show the {truth.target} block at its true place in two exterior views in its "
               f"last {s.last} frames (hidden by the gripper, or too small at this view size): input not judged")
        out = {key: {METRIC: None, "task_reason": why} for key, _ in others}
        out[real_key] = {METRIC: False, "task_reason": why, "task_block": truth.target}
        return out
    out = {real_key: verdict(real_views, truth, k, s)}
    for key, src in others:
        try:
            out[key] = verdict(src.load(), truth, k, s)
        except WorldtuneError as e:
            out[key] = {METRIC: None, "task_reason": f"skipped: {e}"}
    return out


def first_seed(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each input's row with the lowest seed (the real clip, seedless, is its input's only row): one verdict per
    input, every model on the same seed, so that k/n counts inputs as the real clips' row does, and an input generated
    under more seeds (or a baseline, whose rows of every seed are one video) does not weigh more."""
    best: dict[tuple[Any, Any], dict[str, Any]] = {}
    for r in rows:
        key = (r.get("run"), r.get("name"))
        if key not in best or (r.get("seed") or 0) < (best[key].get("seed") or 0):
            best[key] = r
    return list(best.values())


def summary(rows: Sequence[dict[str, Any]], status: dict[str, Any]) -> dict[str, Any]:
    """results.json's `task_success`: per model the inputs whose video does the task (k of n judged inputs, first seed,
    Wilson 95 % interval), the same on the inputs whose block moves, how many inputs were not judged, and `videos`:
    the count over every judged video of every seed."""
    from worldtune.serve.ranking import wilson_interval

    if status.get("status") != "ok":
        return status

    def rate(vals: list[bool]) -> dict[str, Any]:
        n, k = len(vals), int(sum(vals))
        lo, hi = wilson_interval(k, n) if n else (None, None)
        return {"done": k, "n": n, "rate": k / n if n else None, "ci_low": lo, "ci_high": hi}

    models: dict[str, Any] = {}
    for label in dict.fromkeys(r["model"] for r in rows):
        every = [r for r in rows if r["model"] == label]
        mine = first_seed(every)
        judged = [r for r in mine if r.get(METRIC) is not None]
        videos = [bool(r[METRIC]) for r in every if r.get(METRIC) is not None]
        models[label] = {**rate([bool(r[METRIC]) for r in judged]),
                         "moved": rate([bool(r[METRIC]) for r in judged if r.get("task_moved")]),
                         "seen_first": int(sum(bool(r.get("task_seen_first")) for r in judged)),
                         "not_judged": len(mine) - len(judged),
                         "videos": {"done": int(sum(videos)), "n": len(videos)}}
    return {**status, "metric": METRIC, "unit": "inputs (each input's first seed)", "models": models}
