"""Sampson error: how well a video's frames agree with one rigid 3D scene seen by the real rig.

For a match x0 ↔ x1 between two frames and a fundamental matrix F (x0ᵀ F x1 = 0), the Sampson
distance √d (worldtune.eval.epipolar) is the first-order distance in pixels of the match from
the epipolar constraint. What makes the number mean something is *which* F and *which* matches:

- **cross-view, two fixed cameras**: F is the real rig's (worldtune.eval.rig): from calibrated
  cameras, or estimated once from the real clip of the same input, and used only after the real
  clip has shown it true (SampsonError.reference: disjoint fits agree, the clip scores under it;
  otherwise `no_reference`, never a self-fit). A calibration is dropped only on evidence against
  it (worldtune.eval.calibration_check): a pair without correct matches is not a wrong calibration. Each frame's SIFT matches
  (mutual nearest neighbours + ratio test) are measured under it. Matches farther than `gate` px
  from the reference geometry are wrong matches: they are counted (`inlier_fraction`), not
  averaged; the rest, sorted by distance and split at wide gaps, the frame reads the largest piece
  of (`agreeing`: look-alikes that pass the gate are scattered over it, correct matches share the
  video's error), its median the frame's value; a frame whose piece has fewer than
  `min_support` matches is skipped, unless SIFT at a lower contrast threshold finds enough on it
  (`fallback_contrast`: detected again only for such frames, and counted as `fallback_frames`; the
  gate and the skip rule are the same). Nothing is fitted to the video, so nothing absorbs its error:
  a view shifted by d px across the epipolar lines reads about d/√2 more (the Sampson distance
  splits an error made in one view between both; along the lines nothing is seen).
- **cross-view with a moving camera, and temporal** (frame t vs t+gap of a moving view): no
  reference exists (the model chooses the camera's path), so F is fitted, but guarded (enough
  distinct inliers, spread over the image, epipoles outside them) and *cross-fitted*: each half
  of the matches is scored under the F fitted to the other half. With K known the temporal fit is
  an essential matrix. Temporal correspondences are KLT tracks checked forward and backward.
  Temporal pairs of fixed cameras are not scored: without a baseline F is undefined.
- **selffit** (`geometry = "selffit"`, or no reference could be had): fixed pairs too are scored
  by a cross-fitted F pooled over the clip. Labelled as such in every output.
- **cross-view, what moves** (`crossview_dynamic`, beside the whole-frame figure of each fixed
  pair with a reference F): the Sampson distance of the epipolar tangent points of the moving
  silhouettes of the two views (worldtune.eval.silhouettes). The whole-frame figure mostly reads
  the static background; this one reads where the arm and what it carries are in each view.

Camera-fixed pixels (the gripper in a wrist view) are masked out of every match (from the real
clip, or boxes per role in the config). Pairs that cannot be scored are skipped and counted per
reason, never averaged. Per frame pair: mean and median; per video: nanmedian of the pair
medians; across videos: statistics of each video's median. Bands: < 1 px excellent, 1-3 good,
3-5 fair, > 5 poor.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from worldtune.errors import EvaluationError, WorldtuneError
from worldtune.eval.calibration_check import calibration_evidence
from worldtune.eval.correspondences import NO_FEATURES, Features, SiftMatcher, track
from worldtune.eval.epipolar import (FitSettings, cross_fitted_distances, distinct, fundamental_from_cameras,
                                     robust_fundamental, sampson_distance)
from worldtune.eval.progress import map_processes
from worldtune.eval.rig import (PairReference, Reference, boxes_mask, camera_fixed_mask, estimate_pair_reference,
                               pair_key)
from worldtune.eval.silhouettes import silhouette_tangency

GEOMETRIES = ("auto", "calibrated", "reference", "selffit")
KINDS = ("temporal", "crossview", "crossview_dynamic")
SCALES = (0.5, 1.0)  # SIFT detection scales measure_scale chooses from
CONTRAST = 0.04  # SIFT's default contrast threshold: what scoring detects at
REFERENCE_CONTRAST = 0.02  # what the reference, built once per input, detects at


# ------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class SampsonConfig:
    """Every knob of the metric; the defaults are the ones results are reported with."""

    geometry: str = "auto"  # auto | calibrated | reference | selffit (see module docstring)
    max_features: int = 2000  # SIFT keypoints per frame
    ratio: float = 0.75  # Lowe's ratio test
    detect_scale: float | str = "auto"  # SIFT on the frame scaled by this; "auto": measured (measure_scale)
    threshold: float = 1.0  # robust fit inlier threshold, pixels
    min_inliers: int = 15  # distinct inliers a fit needs
    min_cells: int = 4  # cells of a 4x4 grid the inliers must cover in each image
    gate: float = 6.0  # reference scoring: matches farther (px) are wrong matches, counted not averaged
    min_support: int = 6  # reference scoring: fewer matches agreeing with it -> pair skipped
    # reference scoring: a frame reads the largest piece of its sorted distances split at gaps > max(agree_px,
    # agree_share x the lower one) (`agreeing`)
    agree_px: float = 0.15
    agree_share: float = 0.15
    window: int = 2  # reference scoring: frame t pools the matches of frames t-window..t+window
    # reference scoring: a frame short of agreeing matches is detected again at this SIFT contrast threshold (None: never)
    fallback_contrast: float | None = 0.02
    min_motion: float = 0.5  # temporal: median track displacement (px) below this = static camera, skipped
    frame_gap: int = 1  # temporal: frame t vs t + gap
    frame_step: int = 1  # evaluate every k-th frame (pair)
    crossview_step: int = 1  # cross-view: every k-th of those frames (SIFT is most of the cost; 2 halves it)
    moving_views: tuple[str, ...] = ("wrist",)  # without calibration: roles containing these move
    masks: tuple[tuple[str, tuple[tuple[float, float, float, float], ...]], ...] = ()  # role -> boxes to ignore
    auto_masks: bool = True  # find camera-fixed pixels of moving views in the real clip
    max_fit_error: float = 1.0  # reference from the real clip: held-out error it must stay under, px
    # reference from the real clip: the error that fits on disjoint frames imply for the estimate (median of 5 splits), px
    max_disagreement: float = 1.0
    min_agreement: float = 0.5  # a reference is used only when the real clip scores under it on this share of frames
    crossview: bool = True
    crossview_dynamic: bool = True  # fixed pairs with a reference F: tangency of the moving silhouettes
    temporal: bool = True

    @property
    def fit(self) -> FitSettings:
        return FitSettings(threshold=self.threshold, min_inliers=self.min_inliers, min_cells=self.min_cells)


# --------------------------------------------------------------------------------- aggregation
@dataclass
class SeriesScore:
    """A series of frame pairs (one view over time, or two views at each time): pairs and skips."""

    name: str
    pair_means: list[float] = field(default_factory=list)
    pair_medians: list[float] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    mode: str = "selffit"  # calibrated | reference | selffit: where F came from
    inlier_fractions: list[float] = field(default_factory=list)  # reference scoring: share within the gate
    dropped: dict[str, int] = field(default_factory=dict)  # parts of scored pairs left out (a cut tangent), per reason
    fallback: int | None = None  # reference scoring: frames scored on the lower-contrast detection (None: no such step)

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
        out = {"mean": _json_float(self.mean), "median": _json_float(self.median), "mode": self.mode,
               "pairs": self.evaluated, "skipped": self.n_skipped, "skip_reasons": dict(self.skipped)}
        if self.inlier_fractions:
            out["inlier_fraction"] = float(np.mean(self.inlier_fractions))
        if self.dropped:
            out["dropped"] = dict(self.dropped)
        if self.fallback is not None:
            out["fallback_frames"] = self.fallback
        groups = two_groups(self.pair_medians)
        if groups is not None:
            out["bimodal"] = groups
        return out


def merge_series(name: str, series: Iterable[SeriesScore]) -> SeriesScore:
    """All pairs of several series as one (a video's temporal score over all of its views)."""
    series = list(series)
    modes = sorted({s.mode for s in series if s.evaluated})
    out = SeriesScore(name, mode="+".join(modes) or (series[0].mode if series else "selffit"))
    for s in series:
        out.pair_means += s.pair_means
        out.pair_medians += s.pair_medians
        out.inlier_fractions += s.inlier_fractions
        for k, v in s.skipped.items():
            out.skip(k, v)
        for k, v in s.dropped.items():
            out.dropped[k] = out.dropped.get(k, 0) + v
        if s.fallback is not None:
            out.fallback = (out.fallback or 0) + s.fallback
    return out


@dataclass
class VideoScore:
    """Sampson results of one video: per view (temporal), per view pair (cross-view), overall."""

    key: str
    temporal: dict[str, SeriesScore] = field(default_factory=dict)
    crossview: dict[str, SeriesScore] = field(default_factory=dict)
    crossview_dynamic: dict[str, SeriesScore] = field(default_factory=dict)  # fixed pairs: what moves
    status: str = "ok"  # "ok" or "skipped: <reason>"
    num_frames: int = 0
    notes: dict[str, str] = field(default_factory=dict)  # what was not scored on purpose, and why
    detect_scale: float | None = None  # the SIFT scale cross-view matching ran at

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def overall(self, kind: str) -> SeriesScore:
        return merge_series(kind, getattr(self, kind).values())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "status": self.status, "num_frames": self.num_frames, "notes": self.notes,
                               "detect_scale": self.detect_scale}
        for kind in KINDS:
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
    """< 1 px excellent, 1-3 good, 3-5 fair, > 5 poor."""
    if pixels is None or not math.isfinite(pixels):
        return "n/a"
    return "excellent" if pixels < 1 else "good" if pixels < 3 else "fair" if pixels < 5 else "poor"


def two_groups(values: Sequence[float], min_share: float = 0.2, min_gap: float = 0.3) -> dict[str, Any] | None:
    """The two groups of a bimodal series of per-frame values, or None when it is not bimodal.

    A median over frames that fall into two groups (say 0.3 px and 1 px) jumps from one group to the
    other when an encode moves a few frames across: its value then says which group is larger, not
    how good the video is. Split at the largest gap between sorted values that leaves each side at
    least `min_share` of the frames; bimodal when the upper group's median is at least twice the
    lower's and `min_gap` px above it, and the gap between the groups is wider than the spread (1.4826
    x MAD) of either. Reported beside the value; the value itself stays the median.
    """
    v = np.sort(np.asarray([x for x in values if x is not None and math.isfinite(x)], np.float64))
    n = len(v)
    lo_n = max(2, math.ceil(min_share * n))
    if n < 2 * lo_n:
        return None
    cuts = range(lo_n, n - lo_n + 1)
    k = max(cuts, key=lambda i: v[i] - v[i - 1])
    low, high = v[:k], v[k:]
    ml, mh = float(np.median(low)), float(np.median(high))
    spread = max(1.4826 * float(np.median(np.abs(low - ml))), 1.4826 * float(np.median(np.abs(high - mh))))
    if mh >= 2 * ml and mh - ml >= min_gap and v[k] - v[k - 1] > spread:
        return {"low_px": round(ml, 3), "high_px": round(mh, 3), "frames_low": int(len(low)), "frames_high": int(len(high))}
    return None


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
    """Sampson error of videos: temporal (within a moving view) and cross-view (between views).

    >>> metric = SampsonError(SampsonConfig())
    >>> ref = metric.reference(real_views, name="ep0")            # once per input
    >>> score = metric.score_views(generated_views, reference=ref)
    >>> score.overall("crossview").median  # pixels
    """

    def __init__(self, config: SampsonConfig | None = None) -> None:
        self.cfg = config or SampsonConfig()
        if self.cfg.geometry not in GEOMETRIES:
            raise EvaluationError(f"unknown Sampson geometry '{self.cfg.geometry}': use one of {list(GEOMETRIES)}")
        self._matchers: dict[tuple[float, float], SiftMatcher] = {}

    # -- building blocks
    def matcher(self, scale: float = 1.0, reference: bool = False, contrast: float = CONTRAST) -> SiftMatcher:
        """SIFT at `scale` and `contrast` for scoring. The reference is built once per input and wants
        every correct match a plain table offers: full size, half SIFT's default contrast threshold."""
        scale, contrast = (1.0, REFERENCE_CONTRAST) if reference else (scale, contrast)
        if (scale, contrast) not in self._matchers:
            self._matchers[scale, contrast] = SiftMatcher(self.cfg.max_features, self.cfg.ratio, scale, contrast)
        return self._matchers[scale, contrast]

    def is_moving(self, role: str, reference: Reference | None = None) -> bool:
        """Calibrated cameras say which move; otherwise a role containing one of `moving_views`."""
        if reference is not None and reference.K:
            return role in reference.moving
        return any(m in role for m in self.cfg.moving_views)

    def masks(self, views: Mapping[str, np.ndarray], reference: Reference | None) -> dict[str, np.ndarray]:
        """Usable pixels per view: the reference's camera-fixed masks and the configured boxes."""
        out: dict[str, np.ndarray] = {}
        boxes = {role: [list(b) for b in bs] for role, bs in self.cfg.masks}
        for role, frames in views.items():
            hw = tuple(frames.shape[1:3])
            m = np.ones(hw, bool)
            if reference is not None and role in reference.masks and reference.masks[role].shape == hw:
                m &= reference.masks[role]
            for key, bs in boxes.items():
                if key in role:
                    m &= boxes_mask(bs, hw)  # type: ignore[arg-type]
            if not m.all():
                out[role] = m
        return out

    def _frames(self, n: int) -> range:
        """The frames cross-view pairs are scored at."""
        return range(0, n, self.cfg.frame_step * self.cfg.crossview_step)

    def features(self, frames: np.ndarray, mask: np.ndarray | None, reference: bool = False,
                 scale: float = 1.0) -> list[Features]:
        """SIFT of the frames on the step grid (others left empty): detected once, used by every pair."""
        m = self.matcher(scale, reference)
        wanted = set(self._frames(len(frames)))
        return [m.detect(frames[t], mask) if t in wanted else NO_FEATURES for t in range(len(frames))]

    # -- reference from a real clip
    def reference(self, views: Mapping[str, np.ndarray], name: str = "reference",
                  base: Reference | None = None) -> Reference:
        """What the real clip says: camera-fixed masks of moving views, the detection scale, and F of each fixed pair, each F proven on the clip before it is used.

        `base` (a calibrated reference) keeps its K and, when the real clip agrees with it, its F;
        only what it lacks is estimated. Every F must then show that the real clip scores under it
        on at least `min_agreement` of the frames where the clip has matches (calibrated F: of the
        frames with enough matches; an estimate: of all frames); one that does not is dropped, with
        the reason, and its pair is `no_reference`: never scored against it, never self-fitted.
        """
        sizes = {r: tuple(v.shape[1:3]) for r, v in views.items()}
        ref = base.for_size(sizes) if base is not None else Reference(name, sizes)  # type: ignore[arg-type]
        ref.pairs = dict(ref.pairs)
        ref.moving = {r for r in views if self.is_moving(r, ref)}
        if self.cfg.auto_masks:
            for role in ref.moving:
                mask = camera_fixed_mask(views[role])
                if mask is not None:
                    ref.masks[role] = mask
        if not self.cfg.crossview:
            return ref
        masks = self.masks(views, ref)
        fixed = sorted(r for r in views if r not in ref.moving)
        ref.detect_scale = self.measure_scale(views, ref, masks)
        if self.cfg.geometry == "selffit":
            return ref
        feats = {r: self.features(views[r], masks.get(r), reference=True) for r in fixed}
        matcher = self.matcher(reference=True)
        for a, b in combinations(fixed, 2):
            key = pair_key(a, b)
            pair = ref.pairs.get(key)
            if pair is None or pair.F is None:
                if self.cfg.geometry not in ("auto", "reference"):
                    continue
                pair = estimate_pair_reference(feats[a], feats[b], matcher, sizes[a], sizes[b], self.cfg.fit,
                                               self.cfg.max_fit_error, self.cfg.max_disagreement)
            if pair.F is not None:
                pair = self.prove(pair, feats[a], feats[b], matcher, (views[a], views[b]))
            ref.pairs[key] = pair
        return ref

    def prove(self, pair: PairReference, fa: Sequence[Features], fb: Sequence[Features],
              matcher: SiftMatcher, frames: tuple[np.ndarray, np.ndarray] | None = None) -> PairReference:
        """The pair's F, kept only when the real clip does not contradict it (see reference).

        An estimate must be supported: the real clip scores under it on `min_agreement` of its frames.
        A calibration is outside evidence and is dropped only on evidence *against* it
        (`calibration_evidence`): across a wide baseline over a plain table SIFT may find no correct
        match at all, and a right calibration must not be dropped for that.
        """
        s = self.crossview_reference(fa, fb, pair.F, matcher, pair.mode)  # type: ignore[arg-type]
        checks = {**pair.checks, "real_clip_frames_scored": s.evaluated, "real_clip_frames": s.evaluated + s.n_skipped,
                  "real_clip_median_px": _json_float(s.median)}
        if pair.mode == "calibrated":
            verdict, why, evidence = self.calibration_evidence(pair.F, fa, fb, matcher, frames)  # type: ignore[arg-type]
            checks.update(evidence)
            if verdict == "disagrees":
                return replace(pair, F=None, checks=checks, reason=f"calibration disagrees with the real clip: {why}")
            if verdict == "unverified":
                checks["unverified"] = why
            return replace(pair, checks=checks)
        need, frames_n = self.cfg.min_agreement, s.evaluated + s.n_skipped
        if s.evaluated < need * max(frames_n, 1):
            return replace(pair, F=None, checks=checks, reason=f"estimate is not supported by the real clip: the clip "
                           f"scores under it on {s.evaluated} of {frames_n} frames (< {need:.0%})")
        return replace(pair, checks=checks)

    def calibration_evidence(self, F: np.ndarray, fa: Sequence[Features], fb: Sequence[Features], matcher: SiftMatcher,
                             frames: tuple[np.ndarray, np.ndarray] | None) -> tuple[str, str, dict[str, Any]]:
        """("agrees" | "disagrees" | "unverified", why, figures) for a calibrated F against the real clip
        (worldtune.eval.calibration_check), with this scorer's fit settings and frame steps."""
        steps = None if frames is None else list(self._frames(min(len(frames[0]), len(frames[1]))))
        sizes = None if frames is None else (tuple(frames[0].shape[1:3]), tuple(frames[1].shape[1:3]))
        return calibration_evidence(F, fa, fb, matcher, self.cfg.fit, self.cfg.min_inliers, frames, steps,
                                    sizes)  # type: ignore[arg-type]

    def measure_scale(self, views: Mapping[str, np.ndarray], ref: Reference | None,
                      masks: Mapping[str, np.ndarray], samples: int = 6) -> float:
        """The SIFT scale cross-view matching runs at: `detect_scale`, or measured on a few frames.

        Half size costs a quarter of the time but on small or codec-blurred views it loses fine
        texture and makes look-alike matches. Measured, not assumed from the height: the matches
        that agree with the pair's reference F (within `gate`; all mutual matches where no F exists)
        over `samples` frames of every pair; half size is taken only when it keeps >= 80 % of what
        full size finds.
        """
        if not isinstance(self.cfg.detect_scale, str):
            return float(self.cfg.detect_scale)
        n = min(len(v) for v in views.values())
        frames = sorted({round(x) for x in np.linspace(0, n - 1, min(samples, n))})
        roles = sorted(r for r in views if ref is None or r not in ref.moving)
        roles = roles if len(roles) >= 2 else sorted(views)
        if len(roles) < 2:
            return 1.0
        found = {}
        for scale in SCALES:
            m = self.matcher(scale)
            feats = {r: [m.detect(views[r][t], masks.get(r)) for t in frames] for r in roles}
            count = 0
            for a, b in combinations(roles, 2):
                pair = ref.pairs.get(pair_key(a, b)) if ref is not None else None
                for fa, fb in zip(feats[a], feats[b]):
                    x0, x1 = m.match(fa, fb)
                    count += int((sampson_distance(pair.F, x0, x1) <= self.cfg.gate).sum()) if pair is not None and \
                        pair.F is not None else len(x0)
            found[scale] = count
        return 0.5 if found[1.0] and found[0.5] >= 0.8 * found[1.0] else 1.0

    # -- series
    def temporal(self, frames: np.ndarray, mask: np.ndarray | None = None, K: np.ndarray | None = None,
                 name: str = "video") -> SeriesScore:
        """Frame t vs t + gap of one moving view: KLT tracks, cross-fitted guarded F per pair."""
        out = SeriesScore(name, mode="selffit")
        gap, wh = self.cfg.frame_gap, (frames.shape[2], frames.shape[1])
        for t in range(0, len(frames) - gap, self.cfg.frame_step):
            x0, x1 = track(frames[t], frames[t + gap], mask)
            if len(x0) < self.cfg.min_inliers:
                out.skip("too_few_matches")
                continue
            if float(np.median(np.linalg.norm(x1 - x0, axis=1))) < self.cfg.min_motion:
                out.skip("static_camera")
                continue
            d, reason = cross_fitted_distances(x0, x1, wh, wh, replace(self.cfg.fit, check_epipole=False), K, seed=t)
            out.skip(reason) if d is None else out.add(d)  # type: ignore[arg-type]
        return out

    def crossview_reference(self, fa: Sequence[Features], fb: Sequence[Features], F: np.ndarray, matcher: SiftMatcher,
                            mode: str, name: str = "a|b",
                            fallback: "tuple[LazyFeatures, LazyFeatures] | None" = None) -> SeriesScore:
        """Each frame's matches measured under the rig's F; wrong matches left out (`agreeing`) and counted.

        A frame is scored on the distinct matches of the frames within ±`window` of it: F is the
        rig's and fixed, so neighbouring frames are more samples of the same constraint, and a
        wide-baseline pair over a plain table rarely has enough correct matches in one frame.
        A frame left with fewer than `min_support` agreeing matches is tried once more on the
        `fallback` detection of both views (a lower SIFT contrast threshold: fine texture a codec
        smoothed keeps a few more keypoints), under the same gate and rule; the series counts the
        frames it scored (`fallback_frames`). A frame it cannot score either is skipped with the
        reason of that last try (`matches_off_reference` once it has enough matches, too few agreeing).
        """
        out = SeriesScore(name, mode=mode, fallback=None if fallback is None else 0)
        steps = list(self._frames(min(len(fa), len(fb))))
        per = {t: matcher.match(fa[t], fb[t]) for t in steps}
        low: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # fallback matches, made only where needed
        for t in steps:
            near, n = self._agreeing(per, t, steps, F)
            if len(near) < self.cfg.min_support and fallback is not None:
                for u in self._pooled(t, steps):
                    if u not in low:
                        low[u] = fallback[0].matcher.match(fallback[0][u], fallback[1][u])
                near, n = self._agreeing(low, t, steps, F)
                out.fallback += len(near) >= self.cfg.min_support  # type: ignore[operator]
            if len(near) < self.cfg.min_support:
                out.skip("too_few_matches" if n < self.cfg.min_support else "matches_off_reference")
                continue
            out.add(near)
            out.inlier_fractions.append(len(near) / n)
        return out

    def _pooled(self, t: int, steps: Sequence[int]) -> list[int]:
        """The scored frames within ±`window` of frame t: those whose matches frame t is scored on."""
        w = self.cfg.window * self.cfg.frame_step
        return [u for u in steps if abs(u - t) <= w]

    def _agreeing(self, matches: Mapping[int, tuple[np.ndarray, np.ndarray]], t: int, steps: Sequence[int],
                  F: np.ndarray) -> tuple[np.ndarray, int]:
        """Sampson distances of frame t's pooled distinct matches that agree with F and each other (`agreeing`),
        and how many distinct matches there were: the skip reason tells the two shortfalls apart."""
        near_t = [matches[u] for u in self._pooled(t, steps)]
        x0 = np.concatenate([m[0] for m in near_t])
        x1 = np.concatenate([m[1] for m in near_t])
        keep = distinct(x0, x1)
        d = sampson_distance(F, x0[keep], x1[keep])
        return agreeing(d, self.cfg.gate, self.cfg.min_support, self.cfg.agree_px, self.cfg.agree_share), len(d)

    def fallback(self, views: Mapping[str, np.ndarray], masks: Mapping[str, np.ndarray],
                 scale: float) -> "dict[str, LazyFeatures] | None":
        """Per view, the lower-contrast detection reference scoring falls back on, or None when off.

        Only a frame with too few matches agreeing with the rig asks for it, so a clip whose matches
        suffice costs nothing more and reads exactly as without it.
        """
        contrast = self.cfg.fallback_contrast
        if contrast is None or contrast >= CONTRAST:
            return None
        matcher = self.matcher(scale, contrast=contrast)
        return {role: LazyFeatures(frames, masks.get(role), matcher) for role, frames in views.items()}

    def crossview_dynamic(self, frames_a: np.ndarray, frames_b: np.ndarray, F: np.ndarray, mode: str,
                          name: str = "a|b") -> SeriesScore:
        """The moving silhouettes' epipolar tangent points measured under the rig's F, frame by frame.

        No appearance matching: each view's moving pixels against its own static background, the
        two tangents from the epipole, the Sampson distance of each tangent point with its
        counterpart (worldtune.eval.silhouettes). Frames without a usable tangent are skipped and
        counted per reason; a tangent cut by the image border is dropped and counted.
        """
        out = SeriesScore(name, mode=mode)
        for f in silhouette_tangency(frames_a, frames_b, F, list(self._frames(min(len(frames_a), len(frames_b))))):
            out.skip(f.reason) if f.reason else out.add(f.distances)  # type: ignore[func-returns-value]
            for r in f.dropped:
                out.dropped[r] = out.dropped.get(r, 0) + 1
        return out

    def crossview_selffit(self, fa: Sequence[Features], fb: Sequence[Features], pooled: bool, matcher: SiftMatcher,
                          size_a: tuple[int, int], size_b: tuple[int, int], name: str = "a|b") -> SeriesScore:
        """Guarded, cross-fitted F: one per frame (a moving view), or pooled over the clip (fixed pair)."""
        out = SeriesScore(name, mode="selffit")
        wa, wb = (size_a[1], size_a[0]), (size_b[1], size_b[0])
        steps = list(self._frames(min(len(fa), len(fb))))
        matches = [matcher.match(fa[t], fb[t]) for t in steps]
        if not pooled:
            for t, (x0, x1) in zip(steps, matches):
                d, reason = cross_fitted_distances(x0, x1, wa, wb, self.cfg.fit, seed=t)
                out.skip(reason) if d is None else out.add(d)  # type: ignore[arg-type]
            return out
        x0 = np.concatenate([m[0] for m in matches]) if matches else np.empty((0, 2))
        x1 = np.concatenate([m[1] for m in matches]) if matches else np.empty((0, 2))
        keep = distinct(x0, x1)
        d, reason = cross_fitted_distances(x0[keep], x1[keep], wa, wb, self.cfg.fit)
        if d is None:
            out.skip(f"pooled_{reason}", len(matches))
            return out
        # every match gets the held-out distance of its distinct representative
        key = np.round(np.concatenate([x0, x1], axis=1)).astype(np.int64)
        lookup = {tuple(k): v for k, v in zip(key[keep], d)}
        start = 0
        for m0, _ in matches:
            dist = np.array([lookup.get(tuple(k), np.nan) for k in key[start:start + len(m0)]])
            start += len(m0)
            out.skip("too_few_matches") if np.isfinite(dist).sum() < self.cfg.min_support else out.add(dist)
        return out

    # -- whole videos
    def score_views(self, views: Mapping[str, np.ndarray], key: str = "video",
                    reference: Reference | None = None) -> VideoScore:
        """Temporal score of every moving view and cross-view score of every pair of views."""
        lengths = {len(v) for v in views.values()}
        score = VideoScore(key, num_frames=min(lengths) if lengths else 0)
        if score.num_frames < 2:  # a one-frame "video" is a broken output, not a clip to score
            score.status = "skipped: fewer than 2 frames"
            return score
        sizes = {r: tuple(v.shape[1:3]) for r, v in views.items()}
        ref = reference.for_size(sizes) if reference is not None else None  # type: ignore[arg-type]
        masks = self.masks(views, ref)
        # a lone view (a plain video) is scored over time: nothing says its camera is fixed
        moving = {r for r in views if self.is_moving(r, ref) or (len(views) == 1 and ref is None)}
        if self.cfg.temporal:
            for role, frames in sorted(views.items()):
                if role in moving:
                    K = ref.K.get(role) if ref is not None else None
                    score.temporal[role] = self.temporal(frames, masks.get(role), K, name=role)
                else:
                    score.notes[f"temporal:{role}"] = "fixed camera: no baseline between its frames, not scored"
        if self.cfg.crossview:
            scale = (ref.detect_scale if isinstance(self.cfg.detect_scale, str) and ref is not None and ref.detect_scale
                     else self.measure_scale(views, ref, masks))
            score.detect_scale = scale
            matcher = self.matcher(scale)
            feats = {role: self.features(frames, masks.get(role), scale=scale) for role, frames in views.items()}
            low = self.fallback(views, masks, scale)
        for a, b in combinations(sorted(views), 2):
            name = f"{a}|{b}"
            fixed = a not in moving and b not in moving
            pair = ref.pairs.get(pair_key(a, b)) if ref is not None else None
            has_F = fixed and self.cfg.geometry != "selffit" and pair is not None and pair.F is not None
            if has_F and pair.checks.get("unverified"):  # kept for lack of evidence against: say why frames are skipped
                score.notes[f"crossview:{name}"] = f"calibration kept, unverified: {pair.checks['unverified']}"
            if self.cfg.crossview:
                if has_F:
                    score.crossview[name] = self.crossview_reference(feats[a], feats[b], pair.F, matcher, pair.mode, name,
                                                                     (low[a], low[b]) if low is not None else None)
                elif fixed and (self.cfg.geometry in ("calibrated", "reference") or (pair is not None and pair.reason)):
                    # a reference that could not be had or failed its proof is never replaced by a self-fit
                    score.crossview[name] = self._no_reference(name, pair, score)
                else:
                    score.crossview[name] = self.crossview_selffit(feats[a], feats[b], fixed, matcher,
                                                                   sizes[a], sizes[b], name)  # type: ignore[arg-type]
            if self.cfg.crossview_dynamic:
                if has_F:
                    score.crossview_dynamic[name] = self.crossview_dynamic(views[a], views[b], pair.F, pair.mode, name)
                elif fixed and self.cfg.geometry != "selffit":
                    score.crossview_dynamic[name] = self._no_reference(name, pair, score, "crossview_dynamic")
                else:
                    score.notes[f"crossview_dynamic:{name}"] = (
                        "a moving camera: no fixed F to hold its silhouettes to, not scored" if not fixed else
                        "geometry = selffit: the dynamic figure needs the rig's F, not scored")
        return score

    def _no_reference(self, name: str, pair: PairReference | None, score: VideoScore,
                      kind: str = "crossview") -> SeriesScore:
        """A fixed pair without the rig's F: every frame skipped as `no_reference`, the reason noted under `kind`."""
        s = SeriesScore(name, mode=self.cfg.geometry if pair is None else pair.mode)
        s.skip("no_reference", len(self._frames(score.num_frames)))
        score.notes[f"{kind}:{name}"] = (pair.reason if pair is not None and pair.reason else
                                         "no reference geometry for this pair")
        return s

    def score_source(self, source: "VideoSource", reference: Reference | None = None) -> VideoScore:
        """Load a source (grid, per-view files or a plain video) and score it; bad files are skips."""
        from worldtune.eval.video import VideoReadError

        try:
            views = source.load()
        except VideoReadError as e:
            return VideoScore(source.key, status=f"skipped: unreadable video ({e})")
        except WorldtuneError as e:  # e.g. a video the layout cannot split
            return VideoScore(source.key, status=f"skipped: {e}")
        return self.score_views(views, key=source.key, reference=reference)

    def reference_source(self, source: "VideoSource", base: Reference | None = None) -> Reference | None:
        """The reference of a real clip file, or None when it cannot be read."""
        from worldtune.eval.video import VideoReadError

        try:
            views = source.load()
        except (VideoReadError, WorldtuneError):
            return base
        return self.reference(views, name=source.key, base=base)

    def score_many(self, sources: Sequence["VideoSource"], workers: int = 1, progress: bool = True,
                   references: Sequence[Reference | None] | None = None) -> list[VideoScore]:
        """Score many videos, in parallel processes when workers > 1, with a progress bar.

        `references[i]` is the rig reference of sources[i] (None: none). Workers are spawned (not
        forked), so a script calling this needs the usual `if __name__ == "__main__":` guard.
        """
        refs = list(references) if references is not None else [None] * len(sources)
        return map_processes(_score_one, [(self.cfg, s, r) for s, r in zip(sources, refs)], workers, "Sampson error",
                             progress)

    def reference_many(self, sources: Sequence["VideoSource"], bases: Sequence[Reference | None], workers: int = 1,
                       progress: bool = True) -> list[Reference | None]:
        """References of many real clips (once per input, before the generated videos are scored)."""
        return map_processes(_reference_one, [(self.cfg, s, b) for s, b in zip(sources, bases)], workers,
                             "rig reference", progress)


class LazyFeatures:
    """SIFT of one view's frames, each detected on first use and kept: the fallback detection runs
    only on the frames a short frame pools, and once however many pairs share the view."""

    def __init__(self, frames: np.ndarray, mask: np.ndarray | None, matcher: SiftMatcher) -> None:
        self.frames, self.mask, self.matcher = frames, mask, matcher
        self._done: dict[int, Features] = {}

    def __getitem__(self, t: int) -> Features:
        if t not in self._done:
            self._done[t] = self.matcher.detect(self.frames[t], self.mask)
        return self._done[t]


def agreeing(d: np.ndarray, gate: float, min_support: int, px: float = 0.15, share: float = 0.15) -> np.ndarray:
    """The distances of the matches that agree with the reference geometry and with each other.

    Of the matches within `gate` px, sorted, split wherever two neighbouring distances lie more than
    max(`px`, `share` x the lower one) apart, and keep the largest piece. Correct matches share the
    video's geometric error and lie close together: codec noise spreads them by a few tenths of a
    pixel, a view shifted by d px moves them together to about d/√2, and a view whose error varies
    over the image (a turned camera, a warp) spreads them over a continuous range that stays one
    piece. Wrong matches that pass the gate (look-alikes) are scattered over it, with gaps between
    them. The earlier rule, a median trimmed to median + 3 robust σ, read the look-alikes whenever
    they outnumbered a frame's correct matches, which over a plain wall flips with the encode; the
    largest piece does not. Ties go to the lower piece. Fewer than `min_support` matches in it:
    returned as is, and the caller skips the frame (scattered look-alikes form no such piece).
    """
    v = np.sort(d[np.isfinite(d) & (d <= gate)])
    if len(v) < min_support:
        return v
    pieces = np.split(v, np.flatnonzero(np.diff(v) > np.maximum(px, share * v[:-1])) + 1)
    return pieces[int(np.argmax([len(p) for p in pieces]))]


def _score_one(cfg: SampsonConfig, source: "VideoSource", reference: Reference | None) -> VideoScore:
    return SampsonError(cfg).score_source(source, reference)


def _reference_one(cfg: SampsonConfig, source: "VideoSource", base: Reference | None) -> Reference | None:
    return SampsonError(cfg).reference_source(source, base)


# ------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class VideoSource:
    """Where a video's camera views come from: exactly one of the three forms.

    - `views`: {role: path} of separate per-camera files;
    - `video` + `layout`: a video split by the layout dict of the generations' info.json
      (`worldtune.data.layout.layout_from_dict`: grid, separate or single);
    - `video` alone: a plain single-view video, its view named "video".
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
    """Across-video statistics of each video's median, plus skip counts (and, for reference scoring, the
    frames scored on the lower-contrast fallback detection), per kind."""
    out: dict[str, Any] = {"videos": len(scores), "videos_skipped": sum(not s.ok for s in scores)}
    for kind in KINDS:
        ok = [s for s in scores if s.ok and getattr(s, kind)]
        merged = [s.overall(kind) for s in ok]
        reasons: Counter[str] = Counter()
        for m in merged:
            reasons.update(m.skipped)
        out[kind] = {**across_videos([m.median for m in merged]),
                     "pairs": sum(m.evaluated for m in merged), "pairs_skipped": sum(reasons.values()),
                     "skip_reasons": dict(reasons)}
        bimodal = sum(two_groups(m.pair_medians) is not None for m in merged)
        if bimodal:  # per-frame values in two groups: the median says which is larger, not stable under re-encoding
            out[kind]["bimodal_videos"] = bimodal
        if any(m.fallback is not None for m in merged):  # reference scoring: pairs scored on the second detection
            out[kind]["fallback_frames"] = sum(m.fallback or 0 for m in merged)
    return out


def estimate_fundamental(x0: np.ndarray, x1: np.ndarray, cfg: SampsonConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """A plain robust F (x0ᵀ F x1 = 0) and its inlier mask, no guards: for callers that check themselves."""
    return robust_fundamental(x0, x1, cfg.fit)


__all__ = ["SampsonError", "SampsonConfig", "VideoScore", "SeriesScore", "VideoSource", "sampson_distance",
           "fundamental_from_cameras", "estimate_fundamental", "across_videos", "summarize", "band", "split_views"]
