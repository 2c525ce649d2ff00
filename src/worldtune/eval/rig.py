"""The real camera rig a generated video is scored against: reference F per fixed pair, masks, K.

A generated robot video imitates a real clip filmed by a real rig. The geometry that rig fixes is
the reference the video is held to, not an F fitted to the video's own matches:

- **calibrated**: the dataset carries the cameras (worldtune's `cameras.json`: K and R, t per
  dataset, per episode or per frame). K follows the preparation's resize/pad into the clip's
  pixels, then the generated video's size; F = K0⁻ᵀ [t]ₓ R K1⁻¹ for each pair of fixed cameras.
- **reference clip**: otherwise F of each fixed pair is estimated once from the REAL clip of the
  same input: the matches of all its frames pooled, each distinct correspondence counted once,
  a guarded robust fit (enough distinct inliers, spread over both images, epipoles outside them),
  accepted only when matches it was not fitted to agree with it (held-out error ≤ `max_fit_error`).

Only fixed cameras have reference geometry: a moving (wrist) camera's pose in a generated video is
the model's own, so its pairs are scored by guarded, cross-fitted self-fits (worldtune.eval.sampson),
with K from the calibration when known.

Camera-fixed pixels (a gripper that rides with the wrist camera) are found in the real clip: pixels
that stay nearly constant in image coordinates while the textured background moves. They are masked
out of matching, so they can neither pass for a static camera nor steer a fit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from worldtune.errors import EvaluationError
from worldtune.eval.epipolar import (MIN_POINTS_FOR_F, FitSettings, cross_fitted_distances, distinct, fundamental_distance,
                                     fundamental_from_cameras, guarded_fit)


@dataclass
class PairReference:
    """The reference F of one fixed camera pair in the pixels of views of size `sizes` (h, w)."""

    F: np.ndarray | None
    mode: str  # "calibrated" | "reference"
    reason: str | None = None  # why there is none
    inliers: int = 0
    fit_error: float | None = None  # held-out median Sampson error of the estimate (reference mode)
    checks: dict[str, Any] = field(default_factory=dict)  # what the real clip said about it (see SampsonError.reference)

    def summary(self) -> dict[str, Any]:
        return {"mode": self.mode, "available": self.F is not None, "reason": self.reason,
                "inliers": self.inliers, "fit_error": self.fit_error, "checks": self.checks}


@dataclass
class Reference:
    """What the real rig says about one input's views; small and picklable (sent to workers)."""

    name: str
    sizes: dict[str, tuple[int, int]]  # role -> (h, w) of the views this reference is in
    moving: set[str] = field(default_factory=set)
    pairs: dict[str, PairReference] = field(default_factory=dict)  # "a|b" (sorted roles)
    K: dict[str, np.ndarray] = field(default_factory=dict)
    masks: dict[str, np.ndarray] = field(default_factory=dict)  # role -> bool (h, w), True = usable
    detect_scale: float | None = None  # SIFT scale measured on the real clip (SampsonError.measure_scale)

    def for_size(self, sizes: Mapping[str, tuple[int, int]]) -> "Reference":
        """The same reference in views of other sizes (a generated video may differ from the clip)."""
        import cv2

        if all(tuple(sizes.get(r, s)) == tuple(s) for r, s in self.sizes.items()):
            return self
        S = {r: _scale_matrix(self.sizes[r], sizes[r]) for r in self.sizes if r in sizes}
        pairs = {}
        for key, p in self.pairs.items():
            a, b = key.split("|")
            F = None if p.F is None or a not in S or b not in S else np.linalg.inv(S[a]).T @ p.F @ np.linalg.inv(S[b])
            pairs[key] = PairReference(F, p.mode, p.reason, p.inliers, p.fit_error, p.checks)
        masks = {r: cv2.resize(m.astype(np.uint8), (sizes[r][1], sizes[r][0]), interpolation=cv2.INTER_NEAREST) > 0
                 for r, m in self.masks.items() if r in sizes}
        K = {r: S[r] @ k for r, k in self.K.items() if r in S}
        return Reference(self.name, {r: tuple(sizes[r]) for r in self.sizes if r in sizes}, set(self.moving), pairs, K,
                         masks, self.detect_scale)

    def summary(self) -> dict[str, Any]:
        return {"moving": sorted(self.moving), "pairs": {k: p.summary() for k, p in self.pairs.items()},
                "detect_scale": self.detect_scale,
                "calibrated_K": sorted(self.K), "masked_fraction": {r: round(float(1 - m.mean()), 4) for r, m in self.masks.items()}}


def _scale_matrix(src_hw: tuple[int, int], dst_hw: tuple[int, int]) -> np.ndarray:
    """Pixel map of a plain resize from src to dst, pixel centres at integers."""
    sx, sy = dst_hw[1] / src_hw[1], dst_hw[0] / src_hw[0]
    return np.array([[sx, 0, (sx - 1) / 2], [0, sy, (sy - 1) / 2], [0, 0, 1.0]])


def pair_key(a: str, b: str) -> str:
    return "|".join(sorted((a, b)))


# ------------------------------------------------------------------------------------ calibrated
@dataclass
class Calibration:
    """cameras.json of a dataset + where each clip comes from: enough to place every camera."""

    cameras: dict[str, dict[str, Any]]  # feature key -> entry
    roles: dict[str, str]  # role -> feature key
    clips: dict[str, dict[str, Any]]  # clip id -> manifest row
    source_sizes: dict[str, tuple[int, int]]  # role -> (h, w) of the source videos
    resize: str
    layout: dict[str, Any]
    height: int
    width: int

    @classmethod
    def load(cls, dataset: str | Path) -> "Calibration | None":
        """The calibration of a prepared dataset folder, or None when it carries no cameras.json."""
        import pyarrow.parquet as pq

        root = Path(dataset)
        cams = root / "cameras.json"
        if not cams.is_file():
            return None
        try:
            doc = json.loads(cams.read_text(encoding="utf-8"))
            info = json.loads((root / "info.json").read_text(encoding="utf-8"))
            rows = pq.read_table(root / "manifest.parquet").to_pylist()
        except (OSError, ValueError) as e:
            raise EvaluationError(f"{root}: cannot read cameras.json/info.json/manifest.parquet ({e}); "
                                  f"re-run `worldtune prepare` or set evaluate.sampson_geometry = 'reference'") from None
        layout = info.get("layout") or {}
        return cls(cameras=doc.get("cameras", {}), roles=dict(info.get("cameras", {})),
                   clips={str(r["clip_id"]): r for r in rows},
                   source_sizes={r: tuple(s) for r, s in (info.get("source_sizes") or {}).items()},
                   resize=str(info.get("resize", "pad")), layout=layout,
                   height=int(info.get("height", 0)), width=int(info.get("width", 0)))

    def cell_size(self, role: str) -> tuple[int, int]:
        from worldtune.data.layout import layout_from_dict

        lay = layout_from_dict({**self.layout, "height": self.height, "width": self.width})
        return tuple(lay.cell_size(self.height, self.width))  # type: ignore[return-value]

    def camera(self, role: str, clip: str, frame: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(K in clip pixels, R, t) of a role at a clip's frame, or None when not calibrated."""
        from worldtune.data.layout import resize_transform

        entry = self.cameras.get(self.roles.get(role, role))
        row = self.clips.get(clip)
        if entry is None or row is None or role not in self.source_sizes:
            return None
        ep, f = str(row["episode_index"]), int(row["start_frame"]) + frame * int(row["stride"])
        pose = entry if "R" in entry else (entry.get("episodes") or {}).get(ep)
        if pose is None:
            return None
        R, t = np.asarray(pose["R"], np.float64), np.asarray(pose["t"], np.float64)
        if R.ndim == 3:  # per frame
            if f >= len(R):
                return None
            R, t = R[f], t[f]
        K = np.asarray(entry["K"], np.float64)
        src_hw = (int(entry.get("height", self.source_sizes[role][0])), int(entry.get("width", self.source_sizes[role][1])))
        sx, sy, ox, oy = resize_transform(src_hw, self.cell_size(role), self.resize)  # type: ignore[arg-type]
        A = np.array([[sx, 0, ox], [0, sy, oy], [0, 0, 1.0]])
        return A @ K, R, t.reshape(3)

    def is_static(self, role: str) -> bool | None:
        entry = self.cameras.get(self.roles.get(role, role))
        return None if entry is None else bool(entry.get("static", True))


def calibrated_reference(cal: Calibration, clip: str, roles: list[str]) -> Reference | None:
    """F of every fixed pair and K of every view from the cameras, in the clip's view pixels."""
    if clip not in cal.clips:
        return None
    cams = {r: cal.camera(r, clip, 0) for r in roles}
    if any(c is None for c in cams.values()):
        return None
    sizes = {r: cal.cell_size(r) for r in roles}
    moving = {r for r in roles if cal.is_static(r) is False}
    ref = Reference(clip, sizes, moving, K={r: c[0] for r, c in cams.items()})  # type: ignore[index]
    for a, b in combinations(sorted(roles), 2):
        if a in moving or b in moving:
            continue
        (Ka, Ra, ta), (Kb, Rb, tb) = cams[a], cams[b]  # type: ignore[misc]
        ref.pairs[pair_key(a, b)] = PairReference(fundamental_from_cameras(Ka, Ra, ta, Kb, Rb, tb), "calibrated")
    return ref


# ---------------------------------------------------------------------------- from the real clip
def estimate_pair_reference(feats_a: list, feats_b: list, matcher: Any, size_a: tuple[int, int],
                            size_b: tuple[int, int], fit: FitSettings, max_fit_error: float = 1.0,
                            max_disagreement: float = 1.0) -> PairReference:
    """F of a fixed pair from all frames of a real clip, or the reason it cannot be trusted.

    Besides the guards of one fit, the frames are split into two disjoint sets of blocks of four
    frames and each is fitted alone, over `SPLITS` splits (alternate blocks, then seeded random
    halves of the blocks): matches that do not fix F (all on one plane: a wall poster, a table top)
    fit a whole family of F's exactly, with a small held-out error, and two independent fits land on
    different members of it. How far apart the two fits lie over the images
    (worldtune.eval.epipolar.fundamental_distance) measures the error of each; the estimate from all
    the matches errs less, by sqrt(n1 n2) / (n1 + n2) of that distance for halves of n1 and n2
    inliers (half of it for equal halves). The median of that implied error over the splits must
    stay within `max_disagreement` px: one unlucky split, or one half short of inliers, no longer
    declines a right estimate (0.45 px from the truth, its one split 1.17 px apart), while wrong ones
    lie several pixels apart on most splits. Where a half has too few matches only because every
    frame repeats the same ones (a static rig: each is counted in the half of its first frame),
    random halves of the matches are fitted instead (split_disagreement).
    """
    m = [matcher.match(fa, fb) for fa, fb in zip(feats_a, feats_b)]
    x0 = np.concatenate([p[0] for p in m]) if m else np.empty((0, 2))
    x1 = np.concatenate([p[1] for p in m]) if m else np.empty((0, 2))
    block = np.concatenate([np.full(len(p[0]), t // 4) for t, p in enumerate(m)]) if m else np.empty(0, int)
    keep = distinct(x0, x1)
    x0, x1, block = x0[keep], x1[keep], block[keep]
    wh_a, wh_b = (size_a[1], size_a[0]), (size_b[1], size_b[0])
    f = guarded_fit(x0, x1, wh_a, wh_b, fit)
    if not f.ok:
        return PairReference(None, "reference", f"real clip: {f.reason} ({len(x0)} distinct matches)", f.inliers)
    held, reason = cross_fitted_distances(x0, x1, wh_a, wh_b, fit)
    if held is None:
        return PairReference(None, "reference", f"real clip: held-out check {reason}", f.inliers)
    inl = held[np.isfinite(held) & (held < 3 * fit.threshold)]
    err = float(np.median(inl)) if len(inl) >= fit.min_inliers else float("inf")
    if not err <= max_fit_error:
        return PairReference(None, "reference", f"real clip: held-out error {err:.2f} px > {max_fit_error} px",
                             f.inliers, err if np.isfinite(err) else None)
    # each half holds about half the inliers: its own guard asks half as many (an F they do not fix
    # lands far from the other half's, which is the test)
    half_fit = replace(fit, min_inliers=max(MIN_POINTS_FOR_F, fit.min_inliers // 2))
    alternate = block % 2
    halves = [guarded_fit(x0[alternate == k], x1[alternate == k], wh_a, wh_b, half_fit) for k in (0, 1)]
    if not all(h.ok for h in halves):
        why = next(h.reason for h in halves if not h.ok)
        if why not in STARVED:
            return PairReference(None, "reference", f"real clip: a fit on half of the frames fails ({why}): the clip "
                                 "cannot show that F is fixed by its matches", f.inliers, err)
        # a static scene repeats its matches in every frame: each is counted once, in the half of its first
        # frame, and the other half is left without them. Split the matches instead of the frames.
        apart, implied = split_disagreement(x0, x1, wh_a, wh_b, half_fit)
        checks = {"split_fits_apart_px": _px(apart), "estimate_error_px": _px(implied)}
        if not implied <= max_disagreement:
            return PairReference(None, "reference", f"real clip: a fit on half of the frames fails ({why}: its frames "
                                 f"repeat the other half's matches) and fits on random halves of the matches put the "
                                 f"estimate's error at {implied:.2f} px > {max_disagreement} px ({apart:.2f} px apart; "
                                 "the matches do not fix F)", f.inliers, err, checks)
        return PairReference(f.F, "reference", None, f.inliers, err, checks)
    apart, implied = split_disagreement(x0, x1, wh_a, wh_b, half_fit, groups=block)
    checks = {"disjoint_fits_apart_px": _px(apart), "estimate_error_px": _px(implied)}
    if not implied <= max_disagreement:
        return PairReference(None, "reference", f"real clip: fits on disjoint frames put the estimate's error at "
                             f"{implied:.2f} px > {max_disagreement} px ({apart:.2f} px apart, median of {SPLITS} "
                             "splits: the matches do not fix F, e.g. all on one plane)", f.inliers, err, checks)
    return PairReference(f.F, "reference", None, f.inliers, err, checks)


STARVED = ("too_few_matches", "too_few_inliers")  # a half fit's failures that say it had too few matches, no more
SPLITS = 5  # splits into two halves split_disagreement fits


def _px(x: float) -> float | None:  # as the rig checks write a distance
    return round(x, 3) if np.isfinite(x) else None


def split_disagreement(x0: np.ndarray, x1: np.ndarray, wh_a: tuple[int, int], wh_b: tuple[int, int],
                       fit: FitSettings, splits: int = SPLITS, groups: np.ndarray | None = None) -> tuple[float, float]:
    """(distance, implied error): medians over `splits` splits of the distinct matches into two halves of how
    far apart (px, over the images) the guarded fits of the halves lie, and of the error that distance implies
    for a fit to all of them (x sqrt(n1 n2) / (n1 + n2), n the halves' inliers); a split whose halves cannot
    both be fitted counts as infinitely apart.

    Without `groups` the halves are seeded random halves of the matches; with them (a label per match, e.g.
    its block of frames) whole groups go to one half: alternate groups first, then seeded random halves of
    the groups. Matches that fix F give the same F from either half; matches that fix only a family of F's
    (mostly on one plane) leave each half's fit to its few off-plane points, and the halves land apart. The
    median over several splits keeps one unlucky split from deciding either way.
    """
    apart, implied = [], []
    labels = np.unique(groups) if groups is not None else None
    for seed in range(splits):
        if labels is None:
            half = np.random.default_rng(seed).permutation(len(x0)) < len(x0) // 2
        else:
            first = (labels[labels % 2 == 0] if seed == 0 else
                     labels[np.random.default_rng(seed).permutation(len(labels))[: len(labels) // 2]])
            half = np.isin(groups, first)  # type: ignore[arg-type]
        fits = [guarded_fit(x0[s], x1[s], wh_a, wh_b, fit) for s in (half, ~half)]
        if all(h.ok for h in fits):
            d = fundamental_distance(fits[0].F, fits[1].F, wh_a, wh_b)  # type: ignore[arg-type]
            n0, n1 = fits[0].inliers, fits[1].inliers
            apart.append(d)
            implied.append(d * math.sqrt(n0 * n1) / (n0 + n1))
        else:
            apart.append(float("inf"))
            implied.append(float("inf"))
    return (float(np.median(apart)), float(np.median(implied))) if apart else (float("inf"), float("inf"))


TEXTURE_GRADIENT = 6.0  # camera_fixed_mask: a pixel with a weaker gradient cannot show motion above codec noise
GRADIENT_SAMPLES = 16  # camera_fixed_mask: frames (evenly spread) whose gradients say where the view is textured


def camera_fixed_mask(frames: np.ndarray, min_background_motion: float = 2.0, ratio: float = 0.2,
                      grow: float = 0.05, gaps: tuple[int, ...] = (1, 2, 4, 8, 16),
                      min_gradient: float = TEXTURE_GRADIENT) -> np.ndarray | None:
    """True where pixels are usable: False on textured regions that stay put while the view moves.

    frames: (T, H, W, 3) uint8 of one moving view of a REAL clip. A pixel is camera-fixed when its
    mean absolute change between frames `gap` apart is below `ratio` x the change of the textured
    pixels (their 75th percentile: the gripper, the most textured thing in view, may be half of them). The gap is the shortest of `gaps` over which the textured pixels change by at
    least `min_background_motion` grey levels: a wrist that moves fast is told apart frame to frame,
    one that moves slowly over a longer baseline (frame to frame, a slow view over a plain table
    changes about as little as the gripper does). None when the view barely moves even over the
    longest gap (nothing can be told apart) or nothing is fixed.

    Textured means both: among the 40 % of pixels with the strongest gradient, and a gradient of at
    least `min_gradient` (Sobel of the blurred grey frame, averaged over time: ~3x the height of a
    step edge in grey levels). A plain region (a table top) changes little whether it moves or not,
    so it is no evidence of being camera-fixed; ranked by percentile alone, its codec noise filled
    the textured share, stood still, and the closing joined it into one mask over most of the view.
    Plain pixels stay usable: they give no features either way.

    Only pixels textured in at least half of the frames (the median of their gradient over the frames at
    least `min_gradient`) can be camera-fixed: what rides with the camera keeps its edges in place all
    along. A pixel of plain table that an edge crosses once (the table's border, an object the view
    passes over) has a time-averaged gradient that counts as textured but changes only while the edge
    goes by, so over the clip it changes as little as the gripper does. Counted as fixed, such trails
    (a table border, the cube on robosuite's Lift as the wrist slows down to it) took half of the mask,
    on the only texture a plain table has.
    """
    import cv2

    if len(frames) < 3:
        return None
    g = np.stack([cv2.GaussianBlur(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), (5, 5), 1.0) for f in frames]).astype(np.float32)
    grads = np.stack([np.hypot(cv2.Sobel(x, cv2.CV_32F, 1, 0), cv2.Sobel(x, cv2.CV_32F, 0, 1))
                      for x in g[:: max(1, len(g) // GRADIENT_SAMPLES)]])
    grad = grads.mean(0)
    textured = (grad > np.percentile(grad, 60)) & (grad >= min_gradient)
    if not textured.any():
        return None
    change, moving_level = None, 0.0
    for gap in (k for k in gaps if k < len(g)):
        change = np.abs(g[gap:] - g[:-gap]).mean(axis=0)
        moving_level = float(np.percentile(change[textured], 75))  # the gripper may be half the texture
        if moving_level >= min_background_motion:
            break
    if change is None or moving_level < min_background_motion:
        return None
    steady = textured & (np.median(grads, axis=0) >= min_gradient)  # textured in at least half of the frames
    fixed = (steady & (change < ratio * moving_level)).astype(np.uint8)
    h, w = fixed.shape
    k = max(3, int(round(grow * max(h, w))) | 1)
    fixed = cv2.morphologyEx(fixed, cv2.MORPH_CLOSE, np.ones((k, k), np.uint8))
    n, labels, stats, _ = cv2.connectedComponentsWithStats(fixed)
    keep = np.zeros_like(fixed)
    for i in range(1, n):  # specks are codec noise on flat texture, not a gripper
        if stats[i, cv2.CC_STAT_AREA] >= 0.002 * h * w:
            keep[labels == i] = 1
    if not keep.any():
        return None
    keep = cv2.dilate(keep, np.ones((k, k), np.uint8))
    return keep == 0


def boxes_mask(boxes: list[list[float]], hw: tuple[int, int]) -> np.ndarray:
    """True outside the given boxes [x0, y0, x1, y1] (fractions of width and height)."""
    h, w = hw
    m = np.ones((h, w), bool)
    for x0, y0, x1, y1 in boxes:
        m[int(y0 * h):int(np.ceil(y1 * h)), int(x0 * w):int(np.ceil(x1 * w))] = False
    return m

