"""The end effector's track: where the gripper is in each exterior view of a video, against where it really was.

Why: pixel metrics say how alike two videos look, not whether the robot went where it went. A robotics user
asks the second question first, and for the synthetic scene (worldtune.scene) the answer is known
exactly: the dataset records the gripper's 3-D position every frame (`observation.state` = x, y, z, opening)
and every camera (`cameras.json`). So for each evaluated clip and each fixed (exterior) camera:

- **the truth**: the recorded gripper positions of the clip's source frames, projected with the recorded
  camera, in the clip view's pixels (K follows prepare's resize/pad, worldtune.eval.rig.Calibration);
- **the measurement**, from pixels: the gripper found in every frame of the video (a model's, a baseline's or
  the real clip), below;
- **the figure**: per view, the median over the frames after the first (the first is the conditioning frame)
  of the distance between the two, in pixels of the clip's view; per video, the mean over its exterior views.
  Frames whose true gripper lies outside the view (or within `margin` of its border) are not scored.

How the gripper is found (`detect`): the arm is the thing that moves, and it is grey. Against a *plate*, the
view without the arm, a frame differs where the arm is. The plate is the per-pixel median of the REAL clip's
frames, each frame's real arm masked out first (a generous tube around the true arm, from the recorded gripper
position upwards): the scene as it looks without the robot, taken once per input and shared by every video of
that input; it says nothing about where a generated arm is. Per frame: both the frame and the plate are
blurred a little (a VAE's blur and the real clip's fine texture then agree), the frame's colours are fitted
to the plate's (a gain and offset per channel, least squares over the pixels that agree best: a VAE's colour
shifts), the pixels that differ by more than `level` grey levels and `noise_factor` robust standard deviations
are the foreground, and of those the ones of the arm's colour form the arm: its chromaticity learned from the
real clip's arm (the moving pixels inside the real arm's tube), or, when the real clip shows too little of it,
the scene's grey. The column hangs from above the view, so the arm is the largest of those blobs that reach the
view's top edge (else of those standing tall and narrow: a column cut by the blur); a compact blob lower down (a
block a model washed out to grey) is not the arm. That blob, grown into the foreground touching it (a block held
in the gripper), reaches down to the gripper: the gripper is its lowest point, at the mean column of its lowest
rows. A frame where no arm is found keeps the last position found, starting from the true position in the first
frame (the frame every video starts from): a video that loses the arm scores as if the arm had stopped there, as
holding the first frame does.

Measured at 64x112 views (docs/eval.md, benchmarks/ee_track_bench.py): the detector's own error on real clips is
about 2 px, through the seed models' VAEs 3.6-4.5 px, while another episode's real clip reads 27 px and the first
frame held 41 px (tests/eval/test_end_effector.py holds it to this).

Only datasets written by worldtune's synthetic scene carry this truth; for any other the figure is absent and
the reason says why (`TrackTruth.load`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from worldtune.eval.rig import Calibration

METRIC = "ee_track_error"  # px, lower is better: the per-video figure (mean over exterior views)
STATE_KEY = "observation.state"

# The scene's arm (worldtune.scene): a column from the gripper up to 0.75 m, every part within
# 0.06 m of its axis. The plate masks a tube a little larger than that; nothing else of the scene is assumed.
ARM_TOP_M = 0.8
ARM_RADIUS_M = 0.07


def _scene_identity() -> tuple[str, tuple[str, ...]]:
    """The robot type and state names the synthetic scene writes (the one place this module reads the scene)."""
    from worldtune.scene.episode import ACTION_NAMES, ROBOT_TYPE

    return ROBOT_TYPE, ACTION_NAMES


@dataclass(frozen=True)
class TrackSettings:
    """How the gripper is told from the scene; sizes are for a view 64 px high and scale with the view."""

    blur: float = 1.0  # px (Gaussian sigma) on frame and plate before they are compared
    level: float = 15.0  # grey levels a foreground pixel differs from the plate by, at least
    noise_factor: float = 6.0  # ... and this many robust standard deviations of the frame's difference
    max_chroma: float = 0.25  # without a learned arm colour: (max - min) / max of an arm pixel's RGB (grey) ...
    min_blue: float = -0.06  # ... and (B - R) / max at least (grey or bluish, not the warm table)
    band: float = 0.1  # the gripper's column: mean over the arm's lowest rows, this share of the view height
    min_area: float = 0.0008  # the arm's blob covers this share of the view at least
    margin: float = 0.05  # frames whose true gripper is closer than this share of the view height to its border
    # (or outside) are not scored


# ----------------------------------------------------------------------------------------------- truth
@dataclass
class ViewTruth:
    """The true gripper of one clip in one fixed view: pixels (T, 2), world points (T, 3), cameras per frame."""

    points: np.ndarray
    world: np.ndarray
    cameras: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (K in view pixels, R, t) per frame
    size: tuple[int, int]  # (h, w) of the view the pixels are in

    def inside(self, margin: float) -> np.ndarray:
        """(T,) bool: the true gripper lies inside the view, at least `margin` x its height from the border."""
        h, w = self.size
        m = max(2.0, margin * h)
        u, v = self.points[:, 0], self.points[:, 1]
        return (u >= m) & (u <= w - 1 - m) & (v >= m) & (v <= h - 1 - m)

    def scaled(self, size: tuple[int, int]) -> "ViewTruth":
        """The same truth in a view of another size (a plain resize, pixel centres at integers)."""
        if tuple(size) == tuple(self.size):
            return self
        sy, sx = size[0] / self.size[0], size[1] / self.size[1]
        S = np.array([[sx, 0, (sx - 1) / 2], [0, sy, (sy - 1) / 2], [0, 0, 1.0]])
        pts = self.points * [sx, sy] + [(sx - 1) / 2, (sy - 1) / 2]
        return ViewTruth(pts, self.world, [(S @ K, R, t) for K, R, t in self.cameras], tuple(size))


class TrackTruth:
    """The recorded gripper path and cameras of a prepared synthetic-scene dataset."""

    def __init__(self, cal: Calibration, states: dict[int, np.ndarray]) -> None:
        self.cal = cal
        self.states = states  # episode -> (frames, 3) gripper positions in metres

    @classmethod
    def load(cls, dataset: str | Path | None) -> "TrackTruth | str":
        """The truth of a prepared dataset, or the reason (one line) it has none."""
        if dataset is None:
            return "no prepared dataset found (set evaluate.dataset, or generate from a prepared dataset)"
        root = Path(dataset)
        cal = Calibration.load(root)
        if cal is None:
            return (f"{root} has no cameras.json: the true gripper path needs the dataset's cameras (worldtune's "
                    "synthetic scene records them)")
        try:
            info = json.loads((root / "info.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            return f"{root / 'info.json'} unreadable ({e})"
        src = _source_root(root, str((info.get("source") or {}).get("path") or ""))
        if src is None:
            return (f"the source dataset of {root} ({(info.get('source') or {}).get('path')}) is not found: its "
                    f"{STATE_KEY} holds the gripper's path")
        robot, names = _scene_identity()
        try:
            meta = json.loads((src / "meta" / "info.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            return f"{src / 'meta' / 'info.json'} unreadable ({e})"
        feat = (meta.get("features") or {}).get(STATE_KEY) or {}
        if meta.get("robot_type") != robot or list(feat.get("names") or [])[:3] != list(names[:3]):
            return (f"{src} is not worldtune's synthetic scene (robot_type {meta.get('robot_type')!r}): no true "
                    "gripper path to compare with")
        return cls(cal, _read_states(src))

    def views(self, clip: str) -> dict[str, ViewTruth]:
        """The true gripper of `clip` in each of the dataset's fixed views where it is known."""
        out = {}
        for role in sorted(self.cal.roles):
            v = self.view(clip, role)
            if v is not None:
                out[role] = v
        return out

    def view(self, clip: str, role: str, frames: int | None = None) -> ViewTruth | None:
        """The true gripper of `clip`'s first `frames` frames (all) in view `role`, or None when it is not known
        there (not a fixed camera, not calibrated, no state rows)."""
        if self.cal.is_static(role) is not True:
            return None
        row = self.cal.clips.get(clip)
        if row is None or int(row["episode_index"]) not in self.states:
            return None
        frames = int(row["num_frames"]) if frames is None else frames
        state = self.states[int(row["episode_index"])]
        idx = [int(row["start_frame"]) + k * int(row["stride"]) for k in range(frames)]
        cams = [self.cal.camera(role, clip, k) for k in range(frames)]
        if any(c is None for c in cams) or max(idx) >= len(state):
            return None
        world = state[idx].astype(np.float64)
        pts = np.stack([_project(c, x) for c, x in zip(cams, world)])  # type: ignore[arg-type]
        return ViewTruth(pts, world, cams, tuple(self.cal.cell_size(role)))  # type: ignore[arg-type]


def _source_root(dataset: Path, path: str) -> Path | None:
    """The LeRobot source of a prepared dataset: its recorded path as given, else relative to the dataset."""
    if not path:
        return None
    for p in (Path(path), dataset / path, dataset.parent / Path(path).name):
        if (p / "meta" / "info.json").is_file():
            return p
    return None


def _read_states(src: Path) -> dict[int, np.ndarray]:
    """episode -> (frames, 3) gripper positions, in frame order, from every data file."""
    import pyarrow.parquet as pq

    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for f in sorted((src / "data").rglob("*.parquet")):
        t = pq.read_table(f, columns=["episode_index", "frame_index", STATE_KEY])
        eps, frames = t.column("episode_index").to_numpy(), t.column("frame_index").to_numpy()
        state = np.asarray(t.column(STATE_KEY).to_pylist(), np.float64)[:, :3]
        for e in np.unique(eps):
            m = eps == e
            parts.setdefault(int(e), []).append((frames[m], state[m]))
    out = {}
    for e, chunks in parts.items():
        frames = np.concatenate([c[0] for c in chunks])
        out[e] = np.concatenate([c[1] for c in chunks])[np.argsort(frames, kind="stable")]
    return out


def _project(cam: tuple[np.ndarray, np.ndarray, np.ndarray], x: np.ndarray) -> np.ndarray:
    K, R, t = cam
    p = K @ (R @ x + t)
    return p[:2] / p[2]


# ----------------------------------------------------------------------------------------------- plate
def arm_mask(truth: ViewTruth, k: int) -> np.ndarray:
    """(h, w) bool: a tube around the true arm at frame k (the gripper up to ARM_TOP_M), a little larger than it."""
    import cv2

    h, w = truth.size
    m = np.zeros((h, w), np.uint8)
    K, R, t = truth.cameras[k]
    x = truth.world[k]
    for z in np.linspace(x[2] - 0.02, ARM_TOP_M, 48):
        pc = R @ np.array([x[0], x[1], z]) + t
        if pc[2] < 0.05:  # behind or at the camera
            continue
        u, v = (K @ pc)[:2] / pc[2]
        if not (abs(u) < 1e5 and abs(v) < 1e5):
            continue
        r = K[0, 0] * ARM_RADIUS_M / pc[2] + 2
        cv2.circle(m, (int(round(u)), int(round(v))), int(math.ceil(r)), 1, -1)
    return m > 0


@dataclass
class Plate:
    """One input's view without the arm (float32 RGB) and the colour of its real arm (chromaticity, spread)."""

    image: np.ndarray
    arm_colour: np.ndarray | None = None  # median (r, g, b) / (r + g + b) of the real arm's pixels
    arm_spread: float = 0.0  # how far from it (in chromaticity) an arm pixel may lie


def plate(real: np.ndarray, truth: ViewTruth, s: TrackSettings = TrackSettings()) -> Plate:
    """The real clip's view without the arm, the per-pixel median of the frames where the arm is not (the plain
    median where it is in every frame); and the colour of the real arm, from the pixels of its tube that differ
    from that view (None when too few: the scene's grey is assumed then)."""
    n = min(len(real), len(truth.points))
    frames = real[:n].astype(np.float32)
    masks = [arm_mask(truth, k) for k in range(n)]
    masked = frames.copy()
    for k in range(n):
        masked[k][masks[k]] = np.nan
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pixels: filled below
        image = np.nanmedian(masked, axis=0)
    hole = np.isnan(image)
    image[hole] = np.median(frames, axis=0)[hole]
    out = Plate(image.astype(np.float32))
    inside = truth.inside(s.margin)
    chroma = [_chromaticity(f)[fg & m] for f, fg, m, ok in
              ((*_foreground(real[k], out.image, s), masks[k], inside[k]) for k in range(n)) if ok]
    pix = np.concatenate(chroma) if chroma else np.empty((0, 3))
    if len(pix) >= ARM_COLOUR_PIXELS:
        out.arm_colour = np.median(pix, axis=0)
        dist = np.linalg.norm(pix - out.arm_colour, axis=1)
        out.arm_spread = float(np.clip(SPREAD_FACTOR * np.percentile(dist, 75), *SPREAD_RANGE))
    return out


ARM_COLOUR_PIXELS = 30  # real arm pixels needed to learn its colour
SPREAD_FACTOR, SPREAD_RANGE = 2.0, (0.03, 0.12)  # an arm pixel's chromaticity distance: 2x the real arm's 75th
# percentile, within these bounds


def _chromaticity(f: np.ndarray) -> np.ndarray:
    """(h, w, 3) colour without brightness: (r, g, b) / (r + g + b), for pixels not near black."""
    c = np.clip(f, 1, 255)
    return c / np.maximum(c.sum(axis=2, keepdims=True), 60)


# -------------------------------------------------------------------------------------------- detector
def _fit_colours(frame: np.ndarray, plate_: np.ndarray, rounds: int = 2) -> np.ndarray:
    """The frame with a gain and offset per channel fitted to the plate, each round on the 80 % of pixels that
    agree best (the arm and other changes left out): a VAE's colour shift removed, what moved kept."""
    f, p = frame.reshape(-1, 3), plate_.reshape(-1, 3)
    out = f.copy()
    keep = np.ones(len(f), bool)
    for _ in range(rounds + 1):
        fk, pk = f[keep], p[keep]
        fm, pm = fk.mean(0), pk.mean(0)
        var = ((fk - fm) ** 2).mean(0)
        a = np.where(var > 1e-6, ((fk - fm) * (pk - pm)).mean(0) / np.maximum(var, 1e-6), 1.0)  # least squares, per channel
        out = f * a + (pm - a * fm)
        d = np.abs(out - p)
        r = np.maximum(np.maximum(d[:, 0], d[:, 1]), d[:, 2])
        keep = r <= np.partition(r, int(0.8 * (len(r) - 1)))[int(0.8 * (len(r) - 1))]
    return out.reshape(frame.shape).astype(np.float32)


def _foreground(frame: np.ndarray, plate_: np.ndarray, s: TrackSettings) -> tuple[np.ndarray, np.ndarray]:
    """The frame blurred and colour-fitted to the plate (blurred alike), and (h, w) bool: where it differs."""
    import cv2

    sigma = s.blur * plate_.shape[0] / 64
    f = cv2.GaussianBlur(frame.astype(np.float32), (0, 0), sigma)
    p = cv2.GaussianBlur(plate_.astype(np.float32), (0, 0), sigma)
    f = _fit_colours(f, p)
    diff = cv2.GaussianBlur(np.abs(f - p).max(axis=2), (3, 3), 0.8)
    med = float(np.median(diff))
    level = max(s.level, med + s.noise_factor * 1.4826 * float(np.median(np.abs(diff - med))))
    return f, diff > level


def detect(frame: np.ndarray, plate_: Plate, s: TrackSettings = TrackSettings()) -> np.ndarray | None:
    """(u, v) of the gripper in one frame (uint8 RGB, the plate's size), or None when no arm is found."""
    import cv2

    h, w = plate_.image.shape[:2]
    f, moved = _foreground(frame, plate_.image, s)
    fg = moved.astype(np.uint8)
    if plate_.arm_colour is not None:  # the real arm's colour
        like = np.linalg.norm(_chromaticity(f) - plate_.arm_colour, axis=2) < plate_.arm_spread
    else:  # the scene's grey arm
        c = np.clip(f, 1, 255)
        top = np.maximum(c.max(axis=2), 20)
        like = ((c.max(axis=2) - c.min(axis=2)) / top < s.max_chroma) & ((c[..., 2] - c[..., 0]) / top > s.min_blue)
    arm = cv2.morphologyEx((moved & like).astype(np.uint8), cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))
    best = _arm_blob(arm, max(4.0, s.min_area * h * w))
    if best is None:
        return None
    seed = best
    grown = cv2.morphologyEx(fg, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8)) | seed.astype(np.uint8)
    _, parts = cv2.connectedComponents(grown)
    ids = np.unique(parts[seed])
    ys, xs = np.nonzero(np.isin(parts, ids[ids > 0]))
    bottom = ys.max()
    low = ys >= bottom - s.band * h
    return np.array([xs[low].mean(), float(bottom)])


TALL, ASPECT = 0.2, 1.5  # a blob below the top edge is the arm when it stands this tall (share of the view, height/width)


def _arm_blob(arm: np.ndarray, min_area: float) -> np.ndarray | None:
    """The arm's blob among the moving ones of its colour: the column hangs from above the view, so of the blobs that
    reach its top edge the largest, else the largest standing tall and narrow (a washed-out block is compact)."""
    import cv2

    n, labels, stats, _ = cv2.connectedComponentsWithStats(arm)
    ids = [i for i in range(1, n) if stats[i, cv2.CC_STAT_AREA] >= min_area]
    if not ids:
        return None
    top = [i for i in ids if stats[i, cv2.CC_STAT_TOP] <= 1]
    tall = [i for i in ids if stats[i, cv2.CC_STAT_HEIGHT] >= max(TALL * arm.shape[0], ASPECT * stats[i, cv2.CC_STAT_WIDTH])]
    pick = top or tall
    return labels == max(pick, key=lambda i: stats[i, cv2.CC_STAT_AREA]) if pick else None


def track(frames: np.ndarray, plate_: Plate, start: np.ndarray,
          s: TrackSettings = TrackSettings()) -> tuple[np.ndarray, np.ndarray]:
    """(T, 2) gripper positions and (T,) whether each was found; a frame without one keeps the last found,
    starting from `start` (the true first position)."""
    out = np.empty((len(frames), 2))
    found = np.zeros(len(frames), bool)
    state = np.asarray(start, np.float64)
    for k, fr in enumerate(frames):
        p = detect(fr, plate_, s)
        if p is not None:
            state, found[k] = p, True
        out[k] = state
    return out, found


# --------------------------------------------------------------------------------------------- scoring
@dataclass
class ViewScore:
    """One video's track in one view against the truth."""

    error: float | None  # median px over the scored frames; None when no frame could be scored
    frames: int  # frames scored (after the first, true gripper inside the view)
    found: int  # of those, frames where the detector found the gripper (the rest kept the last position)
    track: list[list[float]] = field(default_factory=list)  # (u, v) per frame, for plots
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_view(frames: np.ndarray, plate_: Plate, truth: ViewTruth,
               s: TrackSettings = TrackSettings()) -> ViewScore:
    """Track the gripper in one view's frames (at the truth's size) and compare with the truth."""
    n = min(len(frames), len(truth.points))
    tk, found = track(frames[:n], plate_, truth.points[0], s)
    scored = truth.inside(s.margin)[:n].copy()
    scored[0] = False  # the conditioning frame
    rounded = [[round(float(u), 2), round(float(v), 2)] for u, v in tk]
    if not scored.any():
        return ViewScore(None, 0, 0, rounded, "the true gripper is outside the view in every frame after the first")
    err = np.linalg.norm(tk[scored] - truth.points[:n][scored], axis=1)
    return ViewScore(float(np.median(err)), int(scored.sum()), int(found[scored].sum()), rounded)


def video_figures(views: dict[str, ViewScore]) -> dict[str, Any]:
    """A video's row fields: the figure (mean over views with a value), per view, found share and tracks."""
    vals = [v.error for v in views.values() if v.error is not None]
    frames = sum(v.frames for v in views.values())
    row: dict[str, Any] = {
        METRIC: float(np.mean(vals)) if vals else None,
        "ee_track_views": {r: v.error for r, v in views.items()},
        "ee_track_found": (sum(v.found for v in views.values()) / frames) if frames else None,
        "ee_tracks": {r: v.track for r, v in views.items()},
    }
    if not vals:
        row[f"{METRIC}_reason"] = next((v.reason for v in views.values() if v.reason), "no exterior view")
    return row


def score_input(real: tuple[str, Any], others: Sequence[tuple[str, Any]], truths: dict[str, ViewTruth],
                s: TrackSettings = TrackSettings()) -> dict[str, dict[str, Any]]:
    """The real clip (`real`: key, VideoSource) and every other video of one input (`others`) against the truth
    of each exterior view; the plate of each view comes from the real clip. Per key: row fields."""
    import cv2

    from worldtune.errors import WorldtuneError

    real_key, real = real
    try:
        real_views = real.load()
    except WorldtuneError as e:
        return {k: {f"{METRIC}_reason": f"real clip unreadable: {e}"} for k, _ in [(real_key, real), *others]}
    truths = {r: t.scaled(real_views[r].shape[1:3]) for r, t in truths.items() if r in real_views}
    plates = {r: plate(real_views[r], t, s) for r, t in truths.items()}
    out: dict[str, dict[str, Any]] = {}
    for key, src in [(real_key, real), *others]:
        try:
            views = real_views if src is real else src.load()
        except WorldtuneError as e:
            out[key] = {f"{METRIC}_reason": f"skipped: {e}"}
            continue
        scores = {}
        for role, pl in plates.items():
            if role not in views:
                continue
            fr = views[role]
            h, w = pl.image.shape[:2]
            if fr.shape[1:3] != (h, w):  # a generation at another size: compared at the real clip's
                fr = np.stack([cv2.resize(x, (w, h), interpolation=cv2.INTER_AREA) for x in fr])
            scores[role] = score_view(fr, pl, truths[role].scaled((h, w)), s)
        out[key] = video_figures(scores) if scores else {f"{METRIC}_reason": "no exterior view in this video"}
    out[real_key]["ee_truth"] = {r: [[round(float(u), 2), round(float(v), 2)] for u, v in t.points]
                                 for r, t in truths.items()}
    out[real_key]["ee_view_sizes"] = {r: list(t.size) for r, t in truths.items()}
    return out
