"""Sampson error: how well a video's frames agree with one rigid 3D scene seen by pinhole cameras.

Two frames of a static scene are related by a fundamental matrix F: a point x0 in one frame and
its match x1 in the other satisfy x0ᵀ F x1 = 0. We match keypoints (OpenCV SIFT + Lowe's ratio
test), fit F robustly (USAC_MAGSAC, RANSAC where that is missing), and measure, for every match,
the first-order geometric distance to that constraint (shared/DESIGN.md §6):

    d = (x0ᵀ F x1)² / ((F x1)₁² + (F x1)₂² + (Fᵀ x0)₁² + (Fᵀ x0)₂²),   error = √d  [pixels]

over all ratio-test matches (not only the inliers: a video whose content wobbles has matches F
cannot explain, and they must count). Aggregation: per frame pair mean and median; per video
nanmean of the pair means and nanmedian of the pair medians; across videos, statistics of each
video's median. Two flavours:

- temporal: frame t vs t+gap within one camera view (F fitted per pair);
- cross-view: the same time step in two views. Two fixed cameras share one F for the whole clip,
  so the matches of all frames are pooled into one fit (as NVIDIA does); when a view moves (the
  wrist camera) F changes every frame and is fitted per frame.

Pairs with too few matches or inliers give no meaningful F, and neither do two frames of a static
camera (no baseline: F is degenerate and √d ≈ 0 whatever the content). Such pairs are skipped and
counted per reason ("too_few_matches", "too_few_inliers", "static_camera", ...), never averaged.
Bands: < 1 px excellent, 1-3 good, 3-5 fair, > 5 poor.
"""

from __future__ import annotations

import math
import multiprocessing
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from worldtune.errors import EvaluationError, WorldtuneError
from worldtune.eval.progress import progress_bar

MIN_POINTS_FOR_F = 8  # the normalised 8-point algorithm inside every robust fitter needs this many


# ------------------------------------------------------------------------------------- geometry
def sampson_distance(F: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """√d per correspondence, in pixels, for F with the convention x0ᵀ F x1 = 0.

    x0, x1: (N, 2) pixel coordinates in the first and second frame.
    """
    x0h = np.concatenate([np.asarray(x0, np.float64), np.ones((len(x0), 1))], axis=1)
    x1h = np.concatenate([np.asarray(x1, np.float64), np.ones((len(x1), 1))], axis=1)
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
    """The exact F (x0ᵀ F x1 = 0) of two pinhole cameras with x_cam = R X + t (world to camera).

    Used to validate the metric: with the true F, true correspondences score ~0 px.
    """
    R = np.asarray(R0) @ np.asarray(R1).T  # camera-1 coordinates -> camera-0 coordinates
    t = np.asarray(t0, np.float64).reshape(3) - R @ np.asarray(t1, np.float64).reshape(3)
    E = skew(t) @ R
    F = np.linalg.inv(np.asarray(K0, np.float64)).T @ E @ np.linalg.inv(np.asarray(K1, np.float64))
    return F / np.linalg.norm(F)


# ------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class SampsonConfig:
    """Every knob of the metric; the defaults are the ones results are reported with."""

    matcher: str = "sift"  # "sift" (default) or "orb"; see FEATURE_BACKENDS
    max_features: int = 2000  # keypoints per frame
    ratio: float = 0.75  # Lowe's ratio test
    threshold: float = 1.0  # robust fit inlier threshold, pixels
    confidence: float = 0.999
    max_iters: int = 2000
    min_inliers: int = 15  # fewer inliers -> the pair is skipped (and counted)
    min_motion: float = 0.5  # temporal: median match displacement (px) below this = static camera, skipped
    frame_gap: int = 1  # temporal: frame t vs t + gap
    frame_step: int = 1  # evaluate every k-th frame (pair); 1 = all
    moving_views: tuple[str, ...] = ("wrist",)  # roles containing these move: cross-view F per frame
    crossview: bool = True
    temporal: bool = True


# ------------------------------------------------------------------------------------- features
@dataclass
class Features:
    """Keypoints (N, 2) in pixels and their descriptors (N, D) of one frame."""

    points: np.ndarray
    descriptors: np.ndarray | None


class SiftBackend:
    """OpenCV SIFT + brute-force L2 kNN matching with Lowe's ratio test: offline, CPU, ~20-50 ms a pair."""

    norm = "l2"

    def __init__(self, cfg: SampsonConfig) -> None:
        import cv2

        self.cfg = cfg
        self.detector = cv2.SIFT_create(nfeatures=cfg.max_features)
        self.matcher = cv2.BFMatcher(cv2.NORM_L2)

    def detect(self, rgb: np.ndarray) -> Features:
        import cv2

        gray = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY) if rgb.ndim == 3 else rgb
        kps, desc = self.detector.detectAndCompute(gray, None)
        pts = np.array([k.pt for k in kps], np.float32).reshape(-1, 2)
        return Features(pts, desc)

    def match(self, a: Features, b: Features) -> tuple[np.ndarray, np.ndarray]:
        """Matched pixel coordinates (M, 2) in a and b that pass the ratio test."""
        if a.descriptors is None or b.descriptors is None or len(a.points) < 2 or len(b.points) < 2:
            return np.empty((0, 2), np.float32), np.empty((0, 2), np.float32)
        pairs = self.matcher.knnMatch(a.descriptors, b.descriptors, k=2)
        good = [m[0] for m in pairs if len(m) == 2 and m[0].distance < self.cfg.ratio * m[1].distance]
        ia = np.array([m.queryIdx for m in good], np.int64)
        ib = np.array([m.trainIdx for m in good], np.int64)
        return a.points[ia].reshape(-1, 2), b.points[ib].reshape(-1, 2)


class OrbBackend(SiftBackend):
    """OpenCV ORB + Hamming matching: faster and coarser than SIFT; for quick looks only."""

    def __init__(self, cfg: SampsonConfig) -> None:
        import cv2

        self.cfg = cfg
        self.detector = cv2.ORB_create(nfeatures=cfg.max_features)
        self.matcher = cv2.BFMatcher(cv2.NORM_HAMMING)


FEATURE_BACKENDS: dict[str, type[SiftBackend]] = {"sift": SiftBackend, "orb": OrbBackend}


def make_backend(cfg: SampsonConfig) -> SiftBackend:
    if cfg.matcher not in FEATURE_BACKENDS:
        raise EvaluationError(f"unknown Sampson matcher '{cfg.matcher}': use one of {sorted(FEATURE_BACKENDS)}")
    return FEATURE_BACKENDS[cfg.matcher](cfg)


# -------------------------------------------------------------------------------- robust fitting
def estimate_fundamental(x0: np.ndarray, x1: np.ndarray, cfg: SampsonConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """F (x0ᵀ F x1 = 0) and the inlier mask by USAC_MAGSAC (RANSAC if unavailable), or None."""
    import cv2

    if len(x0) < MIN_POINTS_FOR_F:
        return None
    p0 = np.ascontiguousarray(x0, np.float64)
    p1 = np.ascontiguousarray(x1, np.float64)
    method = getattr(cv2, "USAC_MAGSAC", None)
    for m in ([method] if method is not None else []) + [cv2.FM_RANSAC]:
        try:
            # OpenCV's F satisfies points2ᵀ F points1 = 0, so pass (x1, x0) to get x0ᵀ F x1 = 0.
            F, mask = cv2.findFundamentalMat(p1, p0, m, cfg.threshold, cfg.confidence, cfg.max_iters)
        except cv2.error:
            continue
        if F is not None and F.shape[0] >= 3 and mask is not None:
            return F[:3].astype(np.float64), mask.ravel().astype(bool)
    return None


# --------------------------------------------------------------------------------- aggregation
@dataclass
class SeriesScore:
    """A series of frame pairs (one view over time, or two views at each time): pairs and skips."""

    name: str
    pair_means: list[float] = field(default_factory=list)
    pair_medians: list[float] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def evaluated(self) -> int:
        return len(self.pair_means)

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def mean(self) -> float:
        return _nanmean(self.pair_means)

    @property
    def median(self) -> float:
        return _nanmedian(self.pair_medians)

    def add(self, distances: np.ndarray) -> None:
        d = distances[np.isfinite(distances)]
        if len(d) == 0:
            self.skip("degenerate_fundamental")
            return
        self.pair_means.append(float(d.mean()))
        self.pair_medians.append(float(np.median(d)))

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def summary(self) -> dict[str, Any]:
        return {"mean": _json_float(self.mean), "median": _json_float(self.median),
                "pairs": self.evaluated, "skipped": self.n_skipped, "skip_reasons": dict(self.skipped)}


def merge_series(name: str, series: Iterable[SeriesScore]) -> SeriesScore:
    """All pairs of several series as one (a video's temporal score over all of its views)."""
    out = SeriesScore(name)
    for s in series:
        out.pair_means += s.pair_means
        out.pair_medians += s.pair_medians
        for k, v in s.skipped.items():
            out.skip(k, v)
    return out


@dataclass
class VideoScore:
    """Sampson results of one video: per view (temporal), per view pair (cross-view), overall."""

    key: str
    temporal: dict[str, SeriesScore] = field(default_factory=dict)
    crossview: dict[str, SeriesScore] = field(default_factory=dict)
    status: str = "ok"  # "ok" or "skipped: <reason>"
    num_frames: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def overall(self, kind: str) -> SeriesScore:
        return merge_series(kind, getattr(self, kind).values())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "status": self.status, "num_frames": self.num_frames}
        for kind in ("temporal", "crossview"):
            series = getattr(self, kind)
            out[kind] = {"overall": self.overall(kind).summary() if series else None,
                         "parts": {k: s.summary() for k, s in series.items()}}
        return out


def across_videos(medians: Sequence[float]) -> dict[str, Any]:
    """Statistics of each video's median (NaN videos, with no evaluable pair, are counted apart)."""
    arr = np.asarray([m for m in medians if m is not None], np.float64)
    ok = arr[np.isfinite(arr)]
    stats = {"n": int(len(ok)), "n_nan": int(len(medians) - len(ok))}
    if len(ok):
        stats.update(mean=float(ok.mean()), std=float(ok.std()), median=float(np.median(ok)),
                     min=float(ok.min()), max=float(ok.max()))
    else:
        stats.update(mean=None, std=None, median=None, min=None, max=None)
    return stats


def band(pixels: float | None) -> str:
    """DESIGN.md §6 bands: < 1 px excellent, 1-3 good, 3-5 fair, > 5 poor."""
    if pixels is None or not math.isfinite(pixels):
        return "n/a"
    return "excellent" if pixels < 1 else "good" if pixels < 3 else "fair" if pixels < 5 else "poor"


def _nanmean(values: Sequence[float]) -> float:
    arr = np.asarray(values, np.float64)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else float("nan")


def _nanmedian(values: Sequence[float]) -> float:
    arr = np.asarray(values, np.float64)
    return float(np.nanmedian(arr)) if np.isfinite(arr).any() else float("nan")


def _json_float(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


# ---------------------------------------------------------------------------------- the metric
class SampsonError:
    """Sampson error of videos: temporal (within a view) and cross-view (between views).

    >>> metric = SampsonError(SampsonConfig(min_inliers=15))
    >>> score = metric.score_views({"exterior_1": frames_a, "exterior_2": frames_b})
    >>> score.overall("temporal").median  # pixels
    """

    def __init__(self, config: SampsonConfig | None = None) -> None:
        self.cfg = config or SampsonConfig()
        self.backend = make_backend(self.cfg)

    # -- one pair of images
    def pair_distances(self, f0: Features, f1: Features, min_motion: float = 0.0) -> tuple[np.ndarray | None, str | None]:
        """√d over all matches of two frames with their own fitted F, or (None, skip reason).

        With `min_motion` > 0, a pair whose matches barely move (median displacement below it, in
        px) is skipped as "static_camera": without a baseline F is degenerate and √d ≈ 0 says
        nothing about the video.
        """
        x0, x1 = self.backend.match(f0, f1)
        if len(x0) < max(MIN_POINTS_FOR_F, self.cfg.min_inliers):
            return None, "too_few_matches"
        if min_motion > 0 and float(np.median(np.linalg.norm(x1 - x0, axis=1))) < min_motion:
            return None, "static_camera"
        fit = estimate_fundamental(x0, x1, self.cfg)
        if fit is None:
            return None, "no_fundamental"
        F, inliers = fit
        if int(inliers.sum()) < self.cfg.min_inliers:
            return None, "too_few_inliers"
        return sampson_distance(F, x0, x1), None

    def pair(self, frame0: np.ndarray, frame1: np.ndarray) -> dict[str, Any]:
        """Mean and median √d of two images (or the skip reason): the metric's smallest unit."""
        d, reason = self.pair_distances(self.backend.detect(frame0), self.backend.detect(frame1))
        if d is None:
            return {"skipped": reason}
        return {"mean": float(np.nanmean(d)), "median": float(np.nanmedian(d)), "matches": int(len(d))}

    # -- series
    def temporal(self, frames: np.ndarray | Sequence[Features], name: str = "video") -> SeriesScore:
        """Frame t vs t + gap within one view, F fitted per pair."""
        feats = self._features(frames)
        out = SeriesScore(name)
        gap = self.cfg.frame_gap
        for t in range(0, len(feats) - gap, self.cfg.frame_step):
            d, reason = self.pair_distances(feats[t], feats[t + gap], min_motion=self.cfg.min_motion)
            out.skip(reason) if d is None else out.add(d)
        return out

    def crossview(self, frames_a: np.ndarray | Sequence[Features], frames_b: np.ndarray | Sequence[Features],
                  pooled: bool, name: str = "a|b") -> SeriesScore:
        """The same time step in two views: one pooled F (fixed cameras) or one F per frame."""
        fa, fb = self._features(frames_a), self._features(frames_b)
        out = SeriesScore(name)
        steps = range(0, min(len(fa), len(fb)), self.cfg.frame_step)
        if not pooled:
            for t in steps:
                d, reason = self.pair_distances(fa[t], fb[t])
                out.skip(reason) if d is None else out.add(d)
            return out
        matches = [self.backend.match(fa[t], fb[t]) for t in steps]
        all0 = np.concatenate([m[0] for m in matches]) if matches else np.empty((0, 2))
        all1 = np.concatenate([m[1] for m in matches]) if matches else np.empty((0, 2))
        fit = estimate_fundamental(all0, all1, self.cfg) if len(all0) >= self.cfg.min_inliers else None
        if fit is None or int(fit[1].sum()) < self.cfg.min_inliers:
            out.skip("pooled_fit_failed", len(matches))
            return out
        F = fit[0]
        for x0, x1 in matches:
            if len(x0) < MIN_POINTS_FOR_F:
                out.skip("too_few_matches")
            else:
                out.add(sampson_distance(F, x0, x1))
        return out

    # -- whole videos
    def score_views(self, views: Mapping[str, np.ndarray], key: str = "video") -> VideoScore:
        """Temporal score of every view and cross-view score of every pair of views."""
        lengths = {len(v) for v in views.values()}
        score = VideoScore(key, num_frames=min(lengths) if lengths else 0)
        if score.num_frames < 2:  # a one-frame "video" is a broken output, not a clip to score
            score.status = "skipped: fewer than 2 frames"
            return score
        feats = {role: self._features(frames) for role, frames in views.items()}
        if self.cfg.temporal:
            for role, f in feats.items():
                score.temporal[role] = self.temporal(f, name=role)
        if self.cfg.crossview:
            for a, b in combinations(sorted(feats), 2):
                pooled = not (self.is_moving(a) or self.is_moving(b))
                score.crossview[f"{a}|{b}"] = self.crossview(feats[a], feats[b], pooled, name=f"{a}|{b}")
        return score

    def score_source(self, source: "VideoSource") -> VideoScore:
        """Load a source (grid, per-view files or a plain video) and score it; bad files are skips."""
        from worldtune.eval.video import VideoReadError

        try:
            views = source.load()
        except VideoReadError as e:
            return VideoScore(source.key, status=f"skipped: unreadable video ({e})")
        except WorldtuneError as e:  # e.g. a video the layout cannot split
            return VideoScore(source.key, status=f"skipped: {e}")
        return self.score_views(views, key=source.key)

    def score_many(self, sources: Sequence["VideoSource"], workers: int = 1, progress: bool = True) -> list[VideoScore]:
        """Score many videos, in parallel processes when workers > 1, with a progress bar.

        Workers are spawned (not forked), so a script calling this needs the usual
        `if __name__ == "__main__":` guard.
        """
        results: dict[int, VideoScore] = {}
        with progress_bar(len(sources), "Sampson error", enabled=progress) as advance:
            if workers <= 1 or len(sources) <= 1:
                for i, src in enumerate(sources):
                    results[i] = self.score_source(src)
                    advance()
            else:
                # spawn, not fork: a forked child inherits OpenCV's thread pool locks and can deadlock
                ctx = multiprocessing.get_context("spawn")
                with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init) as pool:
                    futures = {pool.submit(_score_one, self.cfg, src): i for i, src in enumerate(sources)}
                    for fut in as_completed(futures):
                        results[futures[fut]] = fut.result()
                        advance()
        return [results[i] for i in range(len(sources))]

    def is_moving(self, role: str) -> bool:
        """A view moves when its role contains one of `moving_views` ("wrist" matches "wrist_left")."""
        return any(m in role for m in self.cfg.moving_views)

    def _features(self, frames: np.ndarray | Sequence[Features]) -> list[Features]:
        if len(frames) and isinstance(frames[0], Features):
            return list(frames)  # type: ignore[arg-type]
        step = self.cfg.frame_step
        gap = self.cfg.frame_gap
        # Only frames some pair uses are detected (t on the step grid, and t + gap for temporal).
        needed = set(range(0, len(frames), step)) | {t + gap for t in range(0, len(frames) - gap, step)}
        empty = Features(np.empty((0, 2), np.float32), None)
        return [self.backend.detect(frames[t]) if t in needed else empty for t in range(len(frames))]


def _worker_init() -> None:
    """One OpenCV thread per process: parallelism comes from processes, not from oversubscription."""
    import cv2

    cv2.setNumThreads(1)


def _score_one(cfg: SampsonConfig, source: "VideoSource") -> VideoScore:
    return SampsonError(cfg).score_source(source)


# ------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class VideoSource:
    """Where a video's camera views come from: exactly one of the three forms.

    - `views`: {role: path} of separate per-camera files;
    - `video` + `layout`: a video split by the layout dict of the generations' info.json
      (`worldtune.data.layout.layout_from_dict`: grid, separate or single);
    - `video` alone: a plain single-view video (temporal only), its view named "video".
    """

    key: str
    video: str | None = None
    views: Mapping[str, str] | None = None
    layout: Mapping[str, Any] | None = None

    def load(self) -> dict[str, np.ndarray]:
        from worldtune.eval.video import read_video

        if self.views:
            return {role: read_video(p)[0] for role, p in sorted(self.views.items())}
        if self.video is None:
            raise EvaluationError(f"{self.key}: neither a video nor views given")
        frames, _ = read_video(self.video)
        if self.layout:
            return split_views(frames, self.layout)
        return {"video": frames}


def split_views(frames: np.ndarray, layout: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """{role: frames} of a generated video, split by the data stage's layout (grid, separate, single)."""
    from worldtune.data.layout import layout_from_dict

    return {role: np.asarray(v) for role, v in sorted(layout_from_dict(dict(layout)).split(frames).items())}


def sources_from_paths(paths: Sequence[str | Path], layout: Mapping[str, Any] | None = None) -> list[VideoSource]:
    """Plain or grid video files as sources (keyed by file name)."""
    return [VideoSource(key=Path(p).name, video=str(p), layout=layout) for p in paths]


def summarize(scores: Sequence[VideoScore]) -> dict[str, Any]:
    """Across-video statistics of each video's median, plus skip counts, per kind."""
    out: dict[str, Any] = {"videos": len(scores), "videos_skipped": sum(not s.ok for s in scores)}
    for kind in ("temporal", "crossview"):
        ok = [s for s in scores if s.ok and getattr(s, kind)]
        merged = [s.overall(kind) for s in ok]
        reasons: Counter[str] = Counter()
        for m in merged:
            reasons.update(m.skipped)
        out[kind] = {**across_videos([m.median for m in merged]),
                     "pairs": sum(m.evaluated for m in merged), "pairs_skipped": sum(reasons.values()),
                     "skip_reasons": dict(reasons)}
    return out


__all__ = ["SampsonError", "SampsonConfig", "VideoScore", "SeriesScore", "VideoSource", "sampson_distance",
           "fundamental_from_cameras", "estimate_fundamental", "across_videos", "summarize", "band", "split_views"]
