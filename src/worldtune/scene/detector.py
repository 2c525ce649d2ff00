"""Did the scene's task get done? A success detector that reads the blocks and the bowl from the pixels.

Why: a policy rolled out in a world model comes back as video only. The scene's objects have colours nothing
else in it has (a red, a blue, a green block and a yellow bowl, worldtune.scene.episode's textures), and its
exterior cameras are known (the dataset's meta/cameras.json), so each object can be found in two views and
triangulated to a point in the room; the task's predicate is then checked on those points, the way the
simulator checks it on its state. No model weights, and it runs in a few milliseconds on the CPU.

    detector = SuccessDetector.from_cameras_json("data/meta/cameras.json")
    verdict = detector({"exterior_1_left": frames1, "exterior_2_left": frames2},
                       "picks up the red cube and places it in the bowl.")
    verdict.success  # True, False, or None when an object the task names was not found in two views

Frames are one image [H, W, 3] uint8 RGB per camera, or a clip [T, H, W, 3] (the last `last` frames are
judged, and the task counts as done when it is done in most of them); images of another size than the cameras'
are fine (the pixel coordinates are scaled). The decision, from the points found:

- in the bowl: the block's centre within `BOWL_RADIUS` + `xy_tol` of the bowl's (seen from above), and at the
  height of a block resting on the bowl's floor (not on the table beside it, not held above it), within `z_tol`;
- on a block: its centre within `stack_xy` of the other block's (seen from above), and at the height of a block
  resting on that one (which stands on the table, or on the bowl's floor where it is found in the bowl), within
  `z_tol`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import cv2
import numpy as np

from worldtune.errors import EvaluationError
from worldtune.scene.episode import BOWL_HEIGHT, BOWL_RADIUS, FEATURE_PREFIX, block_size, camera_name
from worldtune.scene.raycast import Camera
from worldtune.scene.task import SceneTask

# HSV ranges (OpenCV's: hue 0-180, saturation and value 0-255) of each object's texture under the scene's
# light; nothing else in the scene is this saturated at these hues (the table's hue stays under 19, its
# saturation under 210; the arm, floor and wall are grey). Red wraps around hue 0.
COLOURS: dict[str, tuple[tuple[int, int], int, int]] = {  # name: ((hue lo, hue hi), min saturation, min value)
    "red": ((172, 6), 160, 35),
    "bowl": ((21, 33), 120, 35),
    "green": ((45, 80), 120, 30),
    "blue": ((100, 125), 120, 30),
}
_WORKSPACE = ((-0.6, 0.6), (-0.45, 0.5), (-0.05, 0.6))  # where an object can be (m): over the table
RESTING_BELOW = 0.12  # m: a centre under this height may rest (on the table, the bowl, a block); above, it is held


@dataclass
class Verdict:
    """The detector's answer for one clip: success (None: could not tell), where it found what, and why."""

    success: bool | None
    task: SceneTask
    reason: str
    positions: dict[str, list[float]] = field(default_factory=dict)  # object: [x, y, z] m (last frame judged)

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "task": self.task.instruction, "reason": self.reason,
                "positions": self.positions}


@dataclass
class SuccessDetector:
    """Finds the scene's objects in two exterior views, triangulates them, and checks the task's predicate."""

    cameras: dict[str, Camera]  # camera name: its model (at least two static exterior cameras)
    last: int = 1  # of a clip, judge this many final frames (majority)
    xy_tol: float = 0.01  # m
    z_tol: float = 0.015  # m
    stack_xy: float = 0.04  # m: a block's centre over the other's footprint (its half diagonal, 3.5 cm)
    min_area: int = 3  # pixels a blob needs to count
    max_reprojection: float = 3.0  # pixels: a pair of blobs farther off than this is not one object
    colours: Mapping[str, tuple[tuple[int, int], int, int]] = field(default_factory=lambda: dict(COLOURS))  # HSV
    # ranges per object (COLOURS'); a caller reading small, re-encoded views may widen them

    def __post_init__(self) -> None:
        self.cameras = {camera_name(n): c for n, c in self.cameras.items() if camera_name(n) != "wrist_left"}
        if len(self.cameras) < 2:
            raise EvaluationError(f"success detector: it needs two exterior cameras, got {list(self.cameras)}: "
                                  "pass the scene's cameras (its meta/cameras.json)")

    @classmethod
    def from_cameras_json(cls, path: str | Path, episode: int | None = None, **kw: Any) -> "SuccessDetector":
        """The detector for a scene dataset's cameras (meta/cameras.json; `episode` where the rig moves per
        episode, as in the "hard" style)."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
            cams = {}
            for key, c in doc["cameras"].items():
                if not c.get("static", True):
                    continue
                if "R" not in c and episode is None:
                    raise EvaluationError(f"success detector: {path} places the cameras per episode: say which "
                                          "episode's clip is judged (episode=...)")
                pose = c if "R" in c else c["episodes"][str(episode)]
                cams[key[len(FEATURE_PREFIX):] if key.startswith(FEATURE_PREFIX) else key] = Camera(
                    np.array(c["K"], float), np.array(pose["R"], float), np.array(pose["t"], float),
                    int(c["width"]), int(c["height"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise EvaluationError(f"success detector: cannot read the cameras from {path} ({e}): give the scene "
                                  "dataset's meta/cameras.json") from None
        return cls(cams, **kw)

    def __call__(self, frames: Mapping[str, np.ndarray], task: SceneTask | str) -> Verdict:
        """Judge a clip (or one frame) per camera against `task` (a SceneTask or its instruction)."""
        task = SceneTask.parse(task)
        views = {camera_name(n): np.asarray(f) for n, f in frames.items() if camera_name(n) in self.cameras}
        if len(views) < 2:
            raise EvaluationError(f"success detector: frames of two exterior cameras needed "
                                  f"({', '.join(self.cameras)}), got {', '.join(frames) or 'none'}")
        clips = {n: (f[None] if f.ndim == 3 else f) for n, f in views.items()}
        length = min(len(c) for c in clips.values())
        verdicts = [self.judge_frame({n: c[t] for n, c in clips.items()}, task)
                    for t in range(max(0, length - self.last), length)]
        known = [v for v in verdicts if v.success is not None]
        if not known:
            return verdicts[-1]
        done = sum(v.success for v in known) * 2 > len(known)
        last = verdicts[-1]
        reason = (last.reason if len(verdicts) == 1 else
                  f"done in {sum(v.success for v in known)} of {len(verdicts)} final frames; {last.reason}")
        return Verdict(done, task, reason, last.positions)

    def judge_frame(self, views: Mapping[str, np.ndarray], task: SceneTask) -> Verdict:
        """One moment: locate what the task names, then check its predicate. A block found at a height where it
        cannot be resting on its place is a failure even where the place itself is hidden."""
        names = [task.target, task.place_on] + (["bowl"] if task.place_on != "bowl" else [])
        found = self.locate(views, names)
        pos = {n: [round(float(v), 4) for v in p] for n, p in found.items()}
        if task.target not in found:
            return Verdict(None, task, f"the {task.target} block is not found in two views", pos)
        t = found[task.target]
        if task.place_on == "bowl":
            want = BOWL_HEIGHT + block_size(task.target)
        else:
            want = self._rest(found, task.place_on) + 2 * block_size(task.place_on) + block_size(task.target)
        height = f"its centre {t[2] * 100:.1f} cm high (resting there: {want * 100:.1f})"
        if abs(t[2] - want) > self.z_tol:
            return Verdict(False, task, f"the {task.target} block is not at the height of its place: {height}", pos)
        if task.place_on not in found:
            return Verdict(None, task, f"the {task.place_on} is not found in two views; {height}", pos)
        d = float(np.hypot(*(t[:2] - found[task.place_on][:2])))
        ok = d <= (BOWL_RADIUS + self.xy_tol if task.place_on == "bowl" else self.stack_xy)
        return Verdict(bool(ok), task, f"the {task.target} block is {d * 100:.1f} cm from the {task.place_on} (seen "
                                       f"from above), {height}", pos)

    @staticmethod
    def _rest(found: Mapping[str, np.ndarray], block: str) -> float:
        """The height of what the block `block` stands on: the bowl's floor where it is found within the bowl,
        else the table. (Its own triangulated height is no guide: with a block on top, only its sides show, and
        their centre lies lower than the block's.)"""
        if block in found and "bowl" in found:
            if np.hypot(*(found[block][:2] - found["bowl"][:2])) <= BOWL_RADIUS:
                return BOWL_HEIGHT
        return 0.0

    def locate(self, views: Mapping[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        """Where each named object is ([x, y, z] m), for those found in two views."""
        (n1, im1), (n2, im2) = list(views.items())[:2]
        hsv1, hsv2 = _hsv(im1), _hsv(im2)
        out = {}
        for name in names:
            blobs1 = self._blobs(hsv1, name, self.cameras[n1], im1.shape)
            blobs2 = self._blobs(hsv2, name, self.cameras[n2], im2.shape)
            best = self._pair(blobs1, blobs2, self.cameras[n1], self.cameras[n2])
            if best is not None:
                out[name] = best
        return out

    def _blobs(self, hsv: np.ndarray, name: str, cam: Camera, shape: tuple[int, ...]) -> list[tuple[np.ndarray, int]]:
        """(centroid in the camera's pixel coordinates, area) of each blob of `name`'s colour."""
        (h0, h1), s_min, v_min = self.colours[name]
        hue = hsv[..., 0]
        in_hue = (hue >= h0) | (hue <= h1) if h0 > h1 else (hue >= h0) & (hue <= h1)
        mask = (in_hue & (hsv[..., 1] >= s_min) & (hsv[..., 2] >= v_min)).astype(np.uint8)
        n, labels, stats, cents = cv2.connectedComponentsWithStats(mask, connectivity=8)
        sx, sy = cam.width / shape[1], cam.height / shape[0]
        out = []
        for k in range(1, n):
            if stats[k, 4] < self.min_area:
                continue
            c = _rim_centre(labels == k) if name == "bowl" else cents[k]
            out.append((np.array([(c[0] + 0.5) * sx - 0.5, (c[1] + 0.5) * sy - 0.5]), int(stats[k, 4])))
        return out

    def _pair(self, b1: list, b2: list, c1: Camera, c2: Camera) -> np.ndarray | None:
        """The pair of blobs, one a view, that triangulates to one point in the workspace: one at a height where
        things rest (under `RESTING_BELOW`) before one in the air (a held block is still found when nothing else
        matches: a stray pair of like-coloured spots elsewhere in the room mostly lands in the air), then the
        largest, then the one that reprojects closer."""
        best, best_key = None, (False, -1, 0.0)
        for p1, a1 in b1:
            for p2, a2 in b2:
                X = triangulate(c1, c2, p1, p2)
                err = max(np.linalg.norm(c1.project(X[None])[0] - p1), np.linalg.norm(c2.project(X[None])[0] - p2))
                inside = all(lo <= v <= hi for v, (lo, hi) in zip(X, _WORKSPACE))
                key = (bool(X[2] < RESTING_BELOW), min(a1, a2), -err)
                if err <= self.max_reprojection and inside and key > best_key:
                    best, best_key = X, key
        return best


def cameras_document(cameras: Mapping[str, Camera]) -> dict[str, Any]:
    """The `meta/cameras.json` document of a fixed rig (what `SuccessDetector.from_cameras_json` reads back): for
    the simulator's cameras, so a judge elsewhere (`worldtune serve`'s) sees the scene as the simulator draws it."""
    return {"format": "worldtune.cameras", "version": 1,
            "cameras": {FEATURE_PREFIX + camera_name(n): {"role": camera_name(n), "K": c.K.tolist(), "R": c.R.tolist(),
                                                          "t": c.t.tolist(), "width": int(c.width),
                                                          "height": int(c.height), "static": True}
                        for n, c in cameras.items()}}


def triangulate(c1: Camera, c2: Camera, p1: np.ndarray, p2: np.ndarray) -> np.ndarray:
    """The world point (linear least squares) seen at pixel p1 by c1 and p2 by c2."""
    P1 = c1.K @ np.hstack([c1.R, c1.t[:, None]])
    P2 = c2.K @ np.hstack([c2.R, c2.t[:, None]])
    A = np.stack([p1[0] * P1[2] - P1[0], p1[1] * P1[2] - P1[1], p2[0] * P2[2] - P2[0], p2[1] * P2[2] - P2[1]])
    X = np.linalg.svd(A)[2][-1]
    return X[:3] / X[3]


def _rim_centre(blob: np.ndarray) -> np.ndarray:
    """The bowl's centre in the image: the centre of the ellipse fitted to its outline (its convex hull), which a
    block in the bowl, hiding part of the bowl's pixels, moves far less than it moves their centroid."""
    pts = cv2.findContours(blob.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)[0]
    hull = cv2.convexHull(np.concatenate(pts))
    if len(hull) < 5:
        ys, xs = np.nonzero(blob)
        return np.array([xs.mean(), ys.mean()])
    (cx, cy), _, _ = cv2.fitEllipse(hull)
    return np.array([cx, cy])


def _hsv(im: np.ndarray) -> np.ndarray:
    if im.dtype != np.uint8 or im.ndim != 3 or im.shape[2] != 3:
        raise EvaluationError(f"success detector: frames must be [H, W, 3] uint8 RGB, got {im.dtype} {im.shape}")
    return cv2.cvtColor(im, cv2.COLOR_RGB2HSV)
