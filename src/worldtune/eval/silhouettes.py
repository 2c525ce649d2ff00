"""Cross-view agreement of what moves: epipolar tangency of moving silhouettes under the rig's F.

SIFT matches of a robot video lie mostly on the static background, so the whole-frame cross-view
figure reads a view whose arm and objects are in the wrong place as low as the real one. Matching
the moving parts themselves does not work across a wide baseline (a plain, moving arm gives a few
matches, most of them wrong). Silhouettes need no appearance matching: for two fixed cameras, an
epipolar plane that touches a solid touches it at a *frontier point*, which both views see on the
outline of the solid, each on the epipolar line through its epipole tangent to its silhouette. So
the two tangent points of view A's moving silhouette and those of view B are correspondences, and
their Sampson distance under the rig's F is the same measure as the whole-frame figure's, taken on
what moves (the technique of camera-network calibration from dynamic silhouettes, used here the
other way round: F is known, the video is checked).

Per frame of two fixed views with the reference F (calibrated, or proven on the real clip; never a
self-fit): the moving pixels of each view (the frame against the view's own static background, the
per-pixel temporal median of that video: a generated arm is found wherever the model put it, and
nothing of the real clip's motion is assumed), cleaned of codec noise; the two outermost points of
the silhouette in the pencil of epipolar lines; the Sampson distance of each tangent point of A
with its counterpart in B. A tangent point on the image border is where the silhouette leaves the
image, not a frontier point: that tangent is dropped and counted. A frame without moving pixels in
a view, with the epipole inside a silhouette (tangents undefined) or with both tangents dropped is
skipped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from worldtune.eval.epipolar import epipoles, sampson_distance

NO_MOVING_PIXELS = "no_moving_pixels"
EPIPOLE_IN_SILHOUETTE = "epipole_in_silhouette"
AT_BORDER = "silhouette_at_border"


@dataclass(frozen=True)
class SilhouetteSettings:
    """How moving pixels are told from the static background, and which silhouettes count."""

    threshold: float = 25.0  # grey levels (max over RGB) a pixel must differ from the background by, at least
    noise_factor: float = 6.0  # ... and this many robust standard deviations of the frame's difference (codec noise)
    min_area: float = 0.002  # a moving blob covers at least this share of the image (smaller ones are noise)
    border: float = 1.0  # a tangent point this close (px) to the image border is where the silhouette is cut


# ------------------------------------------------------------------------------------ moving pixels
def background(frames: np.ndarray) -> np.ndarray:
    """The static background of a fixed view: its per-pixel temporal median (what is there most of the time).

    Bytes are sorted over time as 16-bit integers (numpy sorts those with vector instructions: half the time
    of np.median's selection among bytes); the middle values, averaged as np.median does, are its result.
    """
    n = len(frames)
    if frames.dtype != np.uint8 or n == 0:
        return np.median(frames, axis=0).astype(np.float32)
    ordered = np.sort(frames.astype(np.uint16), axis=0)
    return ((ordered[(n - 1) // 2].astype(np.float64) + ordered[n // 2]) / 2).astype(np.float32)


def moving_mask(frame: np.ndarray, static: np.ndarray, s: SilhouetteSettings = SilhouetteSettings()) -> np.ndarray:
    """(H, W) bool: the pixels of one frame that differ from the view's static background.

    The difference (largest over the colour channels, lightly blurred) must exceed both an absolute
    level and a multiple of the frame's own noise (codecs flicker most on fine texture); an opening
    removes speckle, a closing joins a silhouette cut by a thin edge, and blobs under `min_area` go.
    """
    import cv2

    diff = np.abs(frame.astype(np.float32) - static)
    diff = np.maximum(np.maximum(diff[..., 0], diff[..., 1]), diff[..., 2])  # = max(axis=2), a tenth of its time
    diff = cv2.GaussianBlur(diff, (3, 3), 0.8)
    m = (diff > _level(diff, s)).astype(np.uint8)
    m = cv2.morphologyEx(m, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    m = cv2.morphologyEx(m, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (5, 5)))
    _, labels, stats, _ = cv2.connectedComponentsWithStats(m)
    keep = stats[:, cv2.CC_STAT_AREA] >= s.min_area * m.size  # per label
    keep[0] = False  # the background
    return keep[labels]


def _level(diff: np.ndarray, s: SilhouetteSettings) -> float:
    """max(threshold, noise_factor x 1.4826 x median(diff)): most pixels are static, so the median is the
    noise floor. Where more than half of the pixels lie below the median that would lift the level over
    `threshold` (the usual case), the level is `threshold` and a count says so without the median."""
    if s.noise_factor > 0:
        floor = s.threshold / (s.noise_factor * 1.4826) * (1 - 1e-6)  # margin: the product's rounding cannot reach threshold
        if np.count_nonzero(diff < floor) > diff.size // 2 + 1:  # both middle values below it
            return s.threshold
    return max(s.threshold, s.noise_factor * (1.4826 * float(np.median(diff))))


# ----------------------------------------------------------------------------------------- tangents
@dataclass
class Tangents:
    """The two outermost silhouette points of one view in the pencil of epipolar lines (low, high)."""

    points: np.ndarray  # (2, 2) pixels
    cut: np.ndarray  # (2,) bool: on the image border (the silhouette leaves the image there)
    centroid: np.ndarray  # (2,) of the outline, where the pencil coordinate is 0


def pencil_coordinate(e: np.ndarray, c: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Angle-like coordinate of points x (N, 2) in the pencil of lines through epipole e (homogeneous),
    0 on the line through c, monotonic across the lines, for an epipole in or outside the image or at
    infinity. atan2(det[e, c, x], u·(e_w x − e_xy)) with u the direction from e towards c."""
    e = e / np.linalg.norm(e)
    xh = np.c_[x, np.ones(len(x))]
    side = xh @ np.cross(e, np.r_[c, 1.0])  # det[e, c, x]: which side of the line e-c, how far
    toward = e[2] * x - e[:2]  # direction from e to x (for e at infinity: the lines' direction)
    u = e[2] * c - e[:2]
    return np.arctan2(side, toward @ (u / np.linalg.norm(u)))


def tangents(mask: np.ndarray, e: np.ndarray, s: SilhouetteSettings = SilhouetteSettings()) -> Tangents | str:
    """The tangent points of a view's moving silhouette from its epipole e, or why there are none."""
    import cv2

    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    if not contours:
        return NO_MOVING_PIXELS
    pts = np.concatenate([c.reshape(-1, 2) for c in contours]).astype(np.float64)
    if abs(e[2]) > 1e-12:  # an epipole in the plane: the silhouette must not surround it
        hull = cv2.convexHull(pts.astype(np.float32))
        if cv2.pointPolygonTest(hull, (float(e[0] / e[2]), float(e[1] / e[2])), False) >= 0:
            return EPIPOLE_IN_SILHOUETTE
    c = pts.mean(axis=0)
    theta = pencil_coordinate(e, c, pts)
    p = pts[[int(np.argmin(theta)), int(np.argmax(theta))]]
    h, w = mask.shape
    cut = (p[:, 0] < s.border) | (p[:, 1] < s.border) | (p[:, 0] > w - 1 - s.border) | (p[:, 1] > h - 1 - s.border)
    return Tangents(p, cut, c)


def _line_coordinate(line: np.ndarray, e: np.ndarray, c: np.ndarray) -> float:
    """Pencil coordinate of an epipolar line: that of its point nearest to c (on c's side of e)."""
    n = line[:2] / np.linalg.norm(line[:2])
    foot = c - (line @ np.r_[c, 1.0]) / np.linalg.norm(line[:2]) * n
    return float(pencil_coordinate(e, c, foot[None])[0])


# ------------------------------------------------------------------------------------------- a pair
@dataclass
class FrameTangency:
    """One frame of a view pair: the Sampson distances of its tangent correspondences, or why none."""

    distances: np.ndarray = field(default_factory=lambda: np.empty(0))
    reason: str | None = None  # why the frame is skipped
    dropped: list[str] = field(default_factory=list)  # tangents left out of a scored frame, per reason


def frame_tangency(mask_a: np.ndarray, mask_b: np.ndarray, F: np.ndarray,
                   s: SilhouetteSettings = SilhouetteSettings()) -> FrameTangency:
    """Sampson distances (x_aᵀ F x_b = 0) of the tangent points of two silhouettes, paired by the pencil.

    Which tangent of B goes with which of A: A's tangent lines carried into B (Fᵀ x_a), ordered by
    B's pencil coordinate, the lower with B's lower tangent (F may reverse the pencil's orientation).
    """
    e_a, e_b = epipoles(F)
    ta, tb = tangents(mask_a, e_a, s), tangents(mask_b, e_b, s)
    for t in (ta, tb):
        if isinstance(t, str):
            return FrameTangency(reason=t)
    assert isinstance(ta, Tangents) and isinstance(tb, Tangents)
    carried = [_line_coordinate(F.T @ np.r_[p, 1.0], e_b, tb.centroid) for p in ta.points]
    order = [0, 1] if carried[0] <= carried[1] else [1, 0]
    d, dropped = [], []
    for ia, ib in zip(order, (0, 1)):
        if ta.cut[ia] or tb.cut[ib]:
            dropped.append(AT_BORDER)
            continue
        d.append(float(sampson_distance(F, ta.points[ia][None], tb.points[ib][None])[0]))
    if not d:
        return FrameTangency(reason=AT_BORDER, dropped=dropped)
    return FrameTangency(np.asarray(d), None, dropped)


def silhouette_tangency(frames_a: np.ndarray, frames_b: np.ndarray, F: np.ndarray, steps: list[int],
                        s: SilhouetteSettings = SilhouetteSettings()) -> list[FrameTangency]:
    """frame_tangency at each of `steps`, each view's moving pixels against its own static background."""
    bg_a, bg_b = background(frames_a), background(frames_b)
    return [frame_tangency(moving_mask(frames_a[t], bg_a, s), moving_mask(frames_b[t], bg_b, s), F, s) for t in steps]
