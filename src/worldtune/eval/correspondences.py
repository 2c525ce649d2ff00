"""Point correspondences between frames: SIFT matches across views, KLT tracks over time.

Across two views (wide baselines, different scale and rotation) only descriptors find matches:
OpenCV SIFT, kept only when the match is mutual (each point the other's nearest neighbour) and
passes Lowe's ratio test. Over time within one view, motion between consecutive frames is small,
and pyramidal Lucas-Kanade tracking (KLT) of corners finds far more, sub-pixel accurate
correspondences at a tenth of the cost; a track is kept only when tracking back lands within
`fb_max` pixels of where it started.

Pixels that move with the camera (the gripper in a wrist view) are no evidence of camera motion or
scene geometry: a `mask` (True = usable) removes them before detection.

Speed: SIFT runs on the frame scaled by `scale`; OpenCV's SIFT doubles its input internally, so
half size still localises well (on H.264 frames of a plain-table render: 0.09 px median Sampson
error under the true F at half size, 0.13 px at full size, at a quarter of the time). Upscaling is
OpenCV's precise one: its default shifts every keypoint by about +0.25 px (+0.5 px at half size).
Matching computes each pair's descriptor distances once, as one matrix product, for both directions
(OpenCV's brute-force matcher computes them once per direction and returns Python objects): SIFT's
descriptors are whole numbers 0-255, so every sum is exact in float32 and the distances, hence the
matches, are those of the brute-force matcher to the bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EMPTY = np.empty((0, 2), np.float32)


@dataclass
class Features:
    """Keypoints (N, 2) in full-frame pixels and their descriptors (N, D) of one frame."""

    points: np.ndarray
    descriptors: np.ndarray | None


NO_FEATURES = Features(EMPTY, None)


def gray(rgb: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY) if rgb.ndim == 3 else rgb


class SiftMatcher:
    """SIFT keypoints at `scale` of the frame (`contrast`: SIFT's contrast threshold), mutual
    nearest neighbours + ratio test."""

    def __init__(self, max_features: int = 2000, ratio: float = 0.75, scale: float = 1.0,
                 contrast: float = 0.04) -> None:
        import cv2

        # precise upscale: the default one biases every keypoint (see the module docstring)
        self.detector = cv2.SIFT_create(nfeatures=max_features, contrastThreshold=contrast,
                                        enable_precise_upscale=True)
        self.bf = cv2.BFMatcher(cv2.NORM_L2)  # one OpenCV thread per process, unlike numpy's BLAS pool
        self.ratio, self.scale = ratio, scale

    def detect(self, rgb: np.ndarray, mask: np.ndarray | None = None) -> Features:
        import cv2

        g = gray(rgb)
        m = None if mask is None else mask.astype(np.uint8) * 255
        if self.scale != 1.0:
            size = (max(1, round(g.shape[1] * self.scale)), max(1, round(g.shape[0] * self.scale)))
            g = cv2.resize(g, size, interpolation=cv2.INTER_AREA)
            m = None if m is None else cv2.resize(m, size, interpolation=cv2.INTER_NEAREST)
        kps, desc = self.detector.detectAndCompute(g, m)
        pts = (cv2.KeyPoint_convert(kps) if kps else EMPTY).astype(np.float64).reshape(-1, 2)
        if self.scale != 1.0:  # back to full-frame pixel centres
            pts = (pts + 0.5) / self.scale - 0.5
        return Features(pts, desc)

    def match(self, a: Features, b: Features) -> tuple[np.ndarray, np.ndarray]:
        """Matched pixel coordinates (M, 2) in a and b: mutual nearest neighbours passing the ratio test."""
        if a.descriptors is None or b.descriptors is None or len(a.points) < 2 or len(b.points) < 2:
            return EMPTY, EMPTY
        if _byte_valued(a.descriptors) and _byte_valued(b.descriptors):  # SIFT's: one exact distance matrix
            best, keep = mutual_ratio(a.descriptors, b.descriptors, self.ratio)
        else:
            best, keep = self.mutual_ratio_bf(a.descriptors, b.descriptors)
        if not keep.any():
            return EMPTY, EMPTY
        return a.points[keep], b.points[best[keep]]

    def mutual_ratio_bf(self, da: np.ndarray, db: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """mutual_ratio by OpenCV's brute-force matcher, one pass per direction (any float descriptors)."""
        two = self.bf.knnMatch(da, db, k=2)  # a -> b: best and second best
        back = {m.queryIdx: m.trainIdx for m in self.bf.match(db, da)}  # b -> a: best
        best = np.array([k[0].trainIdx if k else -1 for k in two], np.int64)
        keep = np.array([len(k) == 2 and k[0].distance < self.ratio * k[1].distance
                         and back.get(k[0].trainIdx) == k[0].queryIdx for k in two], bool)
        return best, keep


def _byte_valued(d: np.ndarray) -> bool:
    """float32 descriptors of at most 128 whole numbers 0-255 (SIFT's): distances exact in float32 (mutual_ratio)."""
    return d.dtype == np.float32 and d.ndim == 2 and 0 < d.shape[1] <= 128 and len(d) > 0 \
        and 0 <= float(d.min()) and float(d.max()) <= 255 and bool((d == np.floor(d)).all())


def mutual_ratio(da: np.ndarray, db: np.ndarray, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """For each row of da (N, D): its nearest row of db (L2) and whether the match is kept: the
    nearest is closer than `ratio` x the second nearest, and da's row is in turn db's row's nearest.

    Descriptors must be whole numbers 0-255 with D <= 128 (SIFT's): |a|² + |b|² - 2 a·b is then a sum of
    integers below 2²⁴, exact in float32 in any order, and its float32 square root is the distance
    OpenCV's brute-force matcher computes. Ties go to the lower index, as there.
    """
    import cv2

    ab = cv2.gemm(da, db, 1.0, None, 0.0, flags=cv2.GEMM_2_T)  # OpenCV's threads: one per worker process
    d = np.sqrt((da * da).sum(axis=1)[:, None] + (db * db).sum(axis=1)[None, :] - 2 * ab)
    rows = np.arange(len(d))
    best = d.argmin(axis=1)  # first of equal minima, as the matcher's insertion keeps them
    d1 = d[rows, best]
    d[rows, best] = np.inf
    d2 = d.min(axis=1)
    d[rows, best] = d1
    back = d.argmin(axis=0)  # b -> a: best
    keep = (d1.astype(np.float64) < ratio * d2.astype(np.float64)) & (back[best] == rows)
    return best, keep


def track(frame0: np.ndarray, frame1: np.ndarray, mask: np.ndarray | None = None, max_corners: int = 800,
          fb_max: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """KLT correspondences (M, 2) from frame0 to frame1 that track back to within fb_max px."""
    import cv2

    g0, g1 = gray(frame0), gray(frame1)
    m = None if mask is None else mask.astype(np.uint8) * 255
    p0 = cv2.goodFeaturesToTrack(g0, max_corners, 0.01, 4, mask=m, blockSize=5)
    if p0 is None or len(p0) < 2:
        return EMPTY, EMPTY
    lk = dict(winSize=(15, 15), maxLevel=3, criteria=(cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 30, 0.01))
    p1, st1, _ = cv2.calcOpticalFlowPyrLK(g0, g1, p0, None, **lk)
    back, st2, _ = cv2.calcOpticalFlowPyrLK(g1, g0, p1, None, **lk)
    fb = np.linalg.norm((back - p0).reshape(-1, 2), axis=1)
    keep = (st1.ravel() == 1) & (st2.ravel() == 1) & (fb < fb_max)
    h, w = g0.shape
    q = p1.reshape(-1, 2)
    keep &= (q[:, 0] >= 0) & (q[:, 0] <= w - 1) & (q[:, 1] >= 0) & (q[:, 1] <= h - 1)
    return p0.reshape(-1, 2)[keep].astype(np.float64), q[keep].astype(np.float64)
