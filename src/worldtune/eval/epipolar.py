"""Epipolar geometry for the Sampson metric: distances, F from cameras, robust fits and their guards.

Convention everywhere: a point x0 in the first image and its match x1 in the second satisfy
x0ᵀ F x1 = 0 (pixel coordinates, pixel centres at integers).

Why the guards: on real robot footage an F fitted to a video's own matches is easily a
non-measurement. Matches pooled over the frames of a static rig repeat the same few points, so an
inlier count of 15 can be 13 distinct points; a robust fitter then finds an F whose epipole sits
inside that cluster, and every match lies close to some line through it. A per-frame F from ~15
matches fits them exactly whether they are right or wrong. So a fit is accepted only with enough
*distinct* inliers, spread over the image, with its epipoles outside the inlier clusters; and a
self-fitted F is scored on matches it was not fitted to (two-fold cross-fitting), so it cannot
absorb the error it is meant to measure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_POINTS_FOR_F = 8  # the normalised 8-point algorithm inside every robust fitter needs this many


# ------------------------------------------------------------------------------------ distances
def sampson_distance(F: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """√d per correspondence, in pixels, for F with the convention x0ᵀ F x1 = 0.

    d = (x0ᵀ F x1)² / ((F x1)₁² + (F x1)₂² + (Fᵀ x0)₁² + (Fᵀ x0)₂²); x0, x1: (N, 2) pixels.
    """
    x0h = np.concatenate([np.asarray(x0, np.float64).reshape(-1, 2), np.ones((len(x0), 1))], axis=1)
    x1h = np.concatenate([np.asarray(x1, np.float64).reshape(-1, 2), np.ones((len(x1), 1))], axis=1)
    Fx1 = x1h @ F.T  # rows: F x1
    Ftx0 = x0h @ F  # rows: Fᵀ x0
    num = np.einsum("ij,ij->i", x0h, Fx1) ** 2
    den = Fx1[:, 0] ** 2 + Fx1[:, 1] ** 2 + Ftx0[:, 0] ** 2 + Ftx0[:, 1] ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(np.where(den > 0, num / den, np.nan))


def skew(v: np.ndarray) -> np.ndarray:
    """The cross-product matrix [v]ₓ, so that [v]ₓ w = v × w."""
    return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]], dtype=np.float64)


def fundamental_from_cameras(K0: np.ndarray, R0: np.ndarray, t0: np.ndarray,
                             K1: np.ndarray, R1: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """The exact F (x0ᵀ F x1 = 0) of two pinhole cameras with x_cam = R X + t (world to camera)."""
    R = np.asarray(R0) @ np.asarray(R1).T  # camera-1 coordinates -> camera-0 coordinates
    t = np.asarray(t0, np.float64).reshape(3) - R @ np.asarray(t1, np.float64).reshape(3)
    E = skew(t) @ R
    F = np.linalg.inv(np.asarray(K0, np.float64)).T @ E @ np.linalg.inv(np.asarray(K1, np.float64))
    return F / np.linalg.norm(F)


def epipoles(F: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(e0, e1) homogeneous: e0ᵀ F = 0 (epipole in image 0), F e1 = 0 (in image 1)."""
    _, _, vt = np.linalg.svd(F)
    _, _, vt0 = np.linalg.svd(F.T)
    return vt0[-1], vt[-1]


# --------------------------------------------------------------------------------------- guards
def distinct(x0: np.ndarray, x1: np.ndarray, tol: float = 1.0) -> np.ndarray:
    """Indices of the first of each group of correspondences that coincide within `tol` pixels.

    Matches pooled over the frames of a static rig repeat; counting them once each is what makes
    an inlier count mean something.
    """
    if len(x0) == 0:
        return np.empty(0, np.int64)
    key = np.round(np.concatenate([x0, x1], axis=1) / tol).astype(np.int64)
    low = key.min(axis=0)
    span = key.max(axis=0).astype(np.float64) - low + 1  # in float: no overflow
    if np.prod(span) < 2.0 ** 62:  # the rows as one integer each: a 1-D unique, same groups
        key = np.ravel_multi_index(tuple((key - low).T), tuple(span.astype(np.int64)))
    # return_index sorts stably: each group's first row, as for the rows themselves
    _, first = np.unique(key, axis=0 if key.ndim == 2 else None, return_index=True)
    return np.sort(first)


def cells_covered(points: np.ndarray, width: int, height: int, grid: int = 4) -> int:
    """How many cells of a grid x grid partition of the image hold at least one point."""
    if len(points) == 0:
        return 0
    cx = np.clip((points[:, 0] / max(width, 1) * grid).astype(int), 0, grid - 1)
    cy = np.clip((points[:, 1] / max(height, 1) * grid).astype(int), 0, grid - 1)
    return int(len(np.unique(cy * grid + cx)))


def epipole_in_cluster(e: np.ndarray, points: np.ndarray) -> bool:
    """Whether epipole e (homogeneous) lies inside the convex hull of the points.

    An F whose epipole sits among its own inliers is the degenerate fit of converging wrong matches:
    every point is near *some* line through the epipole.
    """
    import cv2

    if abs(e[2]) < 1e-12 or len(points) < 3:
        return False
    p = e[:2] / e[2]
    if not np.all(np.isfinite(p)) or np.abs(p).max() > 1e7:
        return False
    hull = cv2.convexHull(np.ascontiguousarray(points, np.float32))
    return cv2.pointPolygonTest(hull, (float(p[0]), float(p[1])), False) >= 0


# -------------------------------------------------------------------------------------- fitting
@dataclass(frozen=True)
class FitSettings:
    """The robust fitter's knobs and the guards a fit must pass."""

    threshold: float = 1.0  # inlier threshold of the robust fit, pixels
    confidence: float = 0.999
    max_iters: int = 2000
    min_inliers: int = 15  # distinct inliers
    min_cells: int = 5  # cells of a 4x4 grid covered by the inliers, in each image
    check_epipole: bool = True  # refuse an epipole inside the inliers (off for one view over time:
    # a camera moving forward has its epipole, the focus of expansion, among its matches)


@dataclass
class Fit:
    """A fitted F (or the reason there is none) and the figures that say how far to trust it."""

    F: np.ndarray | None
    reason: str | None = None
    inliers: int = 0  # distinct inliers
    cells: int = 0  # min over both images of the 4x4 cells the inliers cover
    inlier_fraction: float = 0.0

    @property
    def ok(self) -> bool:
        return self.F is not None


def robust_fundamental(x0: np.ndarray, x1: np.ndarray, s: FitSettings,
                       K: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """F (x0ᵀ F x1 = 0) and the inlier mask by USAC_MAGSAC (RANSAC where missing), or None.

    With K (the same camera in both images, e.g. one view over time) the fit is an essential
    matrix (5 degrees of freedom instead of 7), which absorbs less of a video's distortion.
    """
    import cv2

    if len(x0) < MIN_POINTS_FOR_F:
        return None
    p0 = np.ascontiguousarray(x0, np.float64)
    p1 = np.ascontiguousarray(x1, np.float64)
    magsac = getattr(cv2, "USAC_MAGSAC", None)
    methods = ([magsac] if magsac is not None else []) + [cv2.RANSAC if K is not None else cv2.FM_RANSAC]
    for m in methods:
        try:
            # OpenCV's F/E satisfy points2ᵀ F points1 = 0: pass (x1, x0) to get x0ᵀ F x1 = 0.
            if K is not None:
                E, mask = cv2.findEssentialMat(p1, p0, np.asarray(K, np.float64), m, s.confidence, s.threshold,
                                               maxIters=s.max_iters)
                if E is None or E.shape != (3, 3):
                    continue
                Ki = np.linalg.inv(np.asarray(K, np.float64))
                F = Ki.T @ E @ Ki
            else:
                F, mask = cv2.findFundamentalMat(p1, p0, m, s.threshold, s.confidence, s.max_iters)
                if F is None or F.shape[0] < 3:
                    continue
                F = F[:3]
        except cv2.error:
            continue
        if mask is not None:
            return F.astype(np.float64) / np.linalg.norm(F), mask.ravel().astype(bool)
    return None


def guarded_fit(x0: np.ndarray, x1: np.ndarray, size0: tuple[int, int], size1: tuple[int, int],
                s: FitSettings, K: np.ndarray | None = None) -> Fit:
    """A robust F that passes every guard, or the reason it does not.

    size0/size1: (width, height) of the two images (for the spread guard).
    """
    keep = distinct(x0, x1)
    x0, x1 = x0[keep], x1[keep]
    if len(x0) < max(MIN_POINTS_FOR_F, s.min_inliers):
        return Fit(None, "too_few_matches")
    res = robust_fundamental(x0, x1, s, K)
    if res is None:
        return Fit(None, "no_fundamental")
    F, mask = res
    i0, i1 = x0[mask], x1[mask]
    cells = min(cells_covered(i0, *size0), cells_covered(i1, *size1))
    fit = Fit(F, None, int(mask.sum()), cells, float(mask.mean()))
    if fit.inliers < s.min_inliers:
        fit.F, fit.reason = None, "too_few_inliers"
    elif cells < s.min_cells:
        fit.F, fit.reason = None, "inliers_clustered"
    elif s.check_epipole:
        e0, e1 = epipoles(F)
        if epipole_in_cluster(e0, i0) or epipole_in_cluster(e1, i1):
            fit.F, fit.reason = None, "epipole_in_inliers"
    return fit


def cross_fitted_distances(x0: np.ndarray, x1: np.ndarray, size0: tuple[int, int], size1: tuple[int, int],
                           s: FitSettings, K: np.ndarray | None = None,
                           seed: int = 0) -> tuple[np.ndarray | None, str | None]:
    """Sampson distances of every match under an F fitted WITHOUT it (two-fold cross-fitting).

    The matches are split in two seeded random halves; each half is scored under the F fitted to
    the other. An F fitted to the very matches it scores absorbs most of their error (~75 % of a
    smooth 4 px wobble, all of the error of 15 wrong matches); held-out scoring does not.
    """
    keep = distinct(x0, x1)
    x0, x1 = x0[keep], x1[keep]
    if len(x0) < 2 * max(MIN_POINTS_FOR_F, s.min_inliers):
        return None, "too_few_matches"
    half = np.random.default_rng(seed).permutation(len(x0)) < len(x0) // 2
    out = np.full(len(x0), np.nan)
    for fit_on in (half, ~half):
        fit = guarded_fit(x0[fit_on], x1[fit_on], size0, size1, s, K)
        if not fit.ok:
            return None, fit.reason
        out[~fit_on] = sampson_distance(fit.F, x0[~fit_on], x1[~fit_on])
    return out, None


def fundamental_distance(Fa: np.ndarray, Fb: np.ndarray, size0: tuple[int, int], size1: tuple[int, int],
                         n: int = 400) -> float:
    """How far apart two F's are over the images, in pixels (x0ᵀ F x1 = 0; sizes (width, height)).

    Correspondences exact under one F (points spread over image 0, each paired with a point of its
    epipolar line inside image 1) are measured under the other, both ways; the larger median is
    returned. Two fits that agree read ~0; an F whose epipole or lines moved reads how far the
    lines moved where the images are. inf when no epipolar line crosses the other image.
    """
    rng = np.random.default_rng(0)
    worst = 0.0
    for F, G in ((Fa, Fb), (Fb, Fa)):
        x0 = rng.random((n, 2)) * [size0[0] - 1, size0[1] - 1]
        lines = np.c_[x0, np.ones(n)] @ F  # x0ᵀ F: the epipolar line of x0 in image 1
        xs = rng.random(n) * (size1[0] - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ys = -(lines[:, 0] * xs + lines[:, 2]) / lines[:, 1]
        ok = np.isfinite(ys) & (ys >= 0) & (ys <= size1[1] - 1)
        if ok.sum() < 10:
            return float("inf")
        worst = max(worst, float(np.nanmedian(sampson_distance(G, x0[ok], np.c_[xs, ys][ok]))))
    return worst
