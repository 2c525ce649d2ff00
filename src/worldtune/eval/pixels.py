"""Pixel metrics of a generated clip against the real continuation of the same episode, per view.

When the dataset holds what really happened after the conditioning frame, a generated clip can be
compared with it pixel by pixel. These numbers need no downloaded weights (numpy and OpenCV only)
and are computed per camera view on two uint8 RGB clips of shape (T, H, W, 3): the generated one
and the real one, decoded at the same size and frame rate.

Which frames count. The first `start` frames (default 1) are excluded: in image-to-world and
video-to-world generation the model is *given* those frames, so they say nothing about what it
predicted and would only inflate every similarity. Frame-to-frame quantities (motion, flow) at
frame t use the pair (t-1, t), so with start=1 the step from the given frame to the first
predicted one is scored too. `PixelMetrics.frames` lists the frame indices every curve refers to.

The numbers (each a clip value and a curve over the horizon, one entry per scored frame):

- psnr [dB, higher is better]: per frame 10·log10(255² / MSE) with MSE over all pixels and the
  three channels; the clip value is the mean of the per-frame values (the usual video convention:
  every time step weighs the same). Identical frames have an infinite PSNR; every PSNR here is
  capped at PSNR_CAP_DB = 100 dB (a uint8 error of one level in one pixel of a 180x320 frame is
  already 100.5 dB), so a perfect frame reads 100 and averages stay finite.
- ssim [-1..1, higher is better]: the standard SSIM of Wang et al. (2004): Gaussian window 11x11,
  sigma 1.5, K1 = 0.01, K2 = 0.03, data range 255, on the 8-bit luma (OpenCV RGB→GRAY, BT.601
  weights): SSIM is defined on grey levels, and luma is the plane a video codec keeps at full
  resolution. As in the reference implementation, the SSIM map is averaged over the pixels whose
  window lies inside the frame (a 5-pixel border is left out); frames smaller than the window
  use the whole map with reflected borders. Arithmetic is float32 (accurate to about 1e-4).
  cosmos-framework instead averages RGB channels under scikit-image's 7x7 uniform window, so
  its values are not interchangeable with these.
- dynamic_psnr [dB, higher is better]: PSNR over the pixels that really move, following
  NVIDIA cosmos-framework's definition, so that a static background that is easy to copy cannot
  dominate. Motion of the REAL clip at frame t is the channel mean of |real[t] - real[t-1]|; a
  pixel is dynamic when its motion is above the 80th percentile of the motion of all scored
  frames (one threshold per clip, as there: a per-frame threshold would mark 20 % of every frame as
  moving even when nothing moves). The clip value pools the squared errors of all dynamic pixels
  (frames with more motion weigh more) and is capped like psnr; the curve gives each frame's own
  value (NaN where a frame has no dynamic pixel). With start=0, frame 0 uses frame 1's mask (as
  cosmos-framework does). A real clip without motion (or whose pixels all change alike) leaves
  it undefined (NaN, with a reason) rather than silently falling back to plain PSNR.
- motion_iou_spatial, motion_iou_spatiotemporal [0..1, higher is better]: in the spirit of
  Physics-IQ (Motamed et al., 2025): does the generated clip move where, and when, the real one
  does? A binary motion mask at frame t marks the pixels whose grey level (OpenCV RGB→GRAY)
  changes by more than MOTION_THRESHOLD = 10 levels from frame t-1 (Physics-IQ's threshold; the
  simple frame difference replaces its running-average background). Spatial IoU compares the
  masks OR-ed over all scored frames ("where did anything move"); its curve is the same IoU over
  the frames up to t, so its last entry is the clip value. Spatiotemporal IoU is one IoU over all
  (t, y, x) voxels ("did it move at the right place at the right time"); its curve is the
  per-frame IoU. Unlike Physics-IQ's mean of per-frame IoUs, the voxel IoU does not let frames
  where neither clip moves (IoU 1 by convention) inflate the value. When neither clip moves at all
  the IoU is 1 (they agree), also per frame.
- warp_error [8-bit levels 0..255, lower is better] and warp_error_real: a photometric
  flow-warping error for temporal consistency (as WorldScore and WorldArena use it, with OpenCV's
  DIS optical flow in place of RAFT). For each pair (t-1, t), DIS flow (preset FAST) from frame
  t-1 to frame t is computed on grey levels, frame t is warped back onto frame t-1 with cv2.remap
  (bilinear), and the mean absolute RGB difference to frame t-1 is taken over the pixels whose
  flow lands inside the frame. Flicker, popping objects and texture that boils give large values.
  Occlusions and motion blur give a nonzero value even for real footage, so the same number is
  computed on the real clip (warp_error_real) as the reference to read it against; and a frozen
  clip scores ~0, so read it together with the motion IoUs. It depends only on the generated clip.

A metric that cannot be computed is NaN in `values` and its reason is in `reasons`;
`PixelMetrics.to_dict()` turns NaN into None for JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from worldtune.errors import EvaluationError

DEFAULT_START = 1  # the conditioning frame is given to the model, not predicted by it
PSNR_CAP_DB = 100.0
SSIM_WINDOW = 11
SSIM_SIGMA = 1.5
SSIM_K1 = 0.01
SSIM_K2 = 0.03
DYNAMIC_PERCENTILE = 80.0
MOTION_THRESHOLD = 10  # grey levels
DIS_PRESET = cv2.DISOPTICAL_FLOW_PRESET_FAST
MIN_FLOW_SIZE = 16  # DIS refuses frames much smaller than its 8-pixel patches

_PEAK = 255.0

#: Direction of every model metric, for paired differences, win rates and highlighting.
HIGHER_IS_BETTER: dict[str, bool] = {
    "psnr": True,
    "ssim": True,
    "dynamic_psnr": True,
    "motion_iou_spatial": True,
    "motion_iou_spatiotemporal": True,
    "warp_error": False,
}
#: Reference values computed on the real clip: the same for every model, shown beside them.
REFERENCE_METRICS: tuple[str, ...] = ("warp_error_real",)
METRICS: tuple[str, ...] = (*HIGHER_IS_BETTER, *REFERENCE_METRICS)


@dataclass
class PixelMetrics:
    """Pixel metrics of one generated view against the real one.

    frames: the frame indices scored (start .. T-1); every curve has one entry per frame here.
    values: metric -> clip value (NaN when undefined); curves: metric -> per-frame values;
    reasons: metric -> why its value is NaN.
    """

    frames: list[int]
    values: dict[str, float]
    curves: dict[str, list[float]]
    reasons: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN -> None): {"frames", "values", "curves", "reasons"}."""
        return {
            "frames": list(self.frames),
            "values": {k: _finite_or_none(v) for k, v in self.values.items()},
            "curves": {k: [_finite_or_none(v) for v in c] for k, c in self.curves.items()},
            "reasons": dict(self.reasons),
        }


def pixel_metrics(generated: np.ndarray, real: np.ndarray, *, start: int = DEFAULT_START,
                  label: str = "clip", real_warp_error: tuple[float, np.ndarray] | None = None) -> PixelMetrics:
    """All pixel metrics of `generated` against `real` (uint8 (T, H, W, 3) RGB, same shape).

    start: number of leading frames given to the model, excluded from scoring (default 1).
    label: names the clip (file, view) in error messages.
    real_warp_error: flow_warping_error(real, start=start), when several generations share one
    real clip; computed here otherwise.
    """
    _check_clips(generated, real, start, label)
    frames = list(range(start, len(real)))
    values: dict[str, float] = {}
    curves: dict[str, np.ndarray] = {}
    reasons: dict[str, str] = {}

    grey_gen, grey_real = grey_clip(generated), grey_clip(real)
    curves["psnr"] = psnr_curve(generated[start:], real[start:])
    values["psnr"] = float(curves["psnr"].mean())
    curves["ssim"] = ssim_curve(grey_gen[start:], grey_real[start:])
    values["ssim"] = float(curves["ssim"].mean())

    values["dynamic_psnr"], curves["dynamic_psnr"] = dynamic_psnr(generated, real, start=start)
    if math.isnan(values["dynamic_psnr"]):
        reasons["dynamic_psnr"] = ("no pixel of the real clip moves more than the 80th percentile of its motion "
                                   "(the scene does not move, or changes uniformly)")

    iou = motion_iou(motion_masks(grey_gen), motion_masks(grey_real), start=start)
    for name in ("motion_iou_spatial", "motion_iou_spatiotemporal"):
        values[name], curves[name] = iou[name]

    values["warp_error"], curves["warp_error"] = flow_warping_error(generated, grey_gen, start=start)
    values["warp_error_real"], curves["warp_error_real"] = (
        real_warp_error if real_warp_error is not None else flow_warping_error(real, grey_real, start=start))
    too_small = min(real.shape[1:3]) < MIN_FLOW_SIZE
    for name in ("warp_error", "warp_error_real"):
        if math.isnan(values[name]):
            reasons[name] = (f"frames under {MIN_FLOW_SIZE}x{MIN_FLOW_SIZE} pixels are too small for optical flow"
                             if too_small else "no scored frame pair has flow landing inside the frame")

    return PixelMetrics(frames=frames, values=values,
                        curves={k: [float(x) for x in c] for k, c in curves.items()}, reasons=reasons)


# ------------------------------------------------------------------------------ PSNR and SSIM
def psnr_from_mse(mse: np.ndarray | float) -> np.ndarray:
    """10·log10(255² / mse) in dB, capped at PSNR_CAP_DB (mse 0 -> the cap)."""
    mse = np.asarray(mse, dtype=np.float64)
    with np.errstate(divide="ignore"):
        psnr = 10.0 * np.log10(_PEAK**2 / mse)
    return np.minimum(psnr, PSNR_CAP_DB)


def psnr_curve(generated: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Per-frame PSNR in dB (MSE over all pixels and channels of the frame), capped."""
    mse = np.empty(len(real))
    for t, (g, r) in enumerate(zip(generated, real)):
        d = cv2.absdiff(g, r).astype(np.float32).ravel()
        mse[t] = float(np.dot(d, d)) / d.size
    return psnr_from_mse(mse)


def ssim_curve(generated: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Per-frame SSIM (Gaussian 11x11, sigma 1.5, K1 0.01, K2 0.03) of uint8 clips.

    pixel_metrics passes grey clips (T, H, W) from grey_clip; (T, H, W, C) clips give the mean
    over channels.
    """
    return np.array([_ssim_frame(g, r) for g, r in zip(generated, real)])


def _ssim_frame(x8: np.ndarray, y8: np.ndarray) -> float:
    c1, c2 = (SSIM_K1 * _PEAK) ** 2, (SSIM_K2 * _PEAK) ** 2
    x, y = x8.astype(np.float32), y8.astype(np.float32)

    def blur(a: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(a, (SSIM_WINDOW, SSIM_WINDOW), SSIM_SIGMA, borderType=cv2.BORDER_REFLECT)

    mx, my = blur(x), blur(y)
    mxx, myy, mxy = mx * mx, my * my, mx * my
    sxx, syy, sxy = blur(x * x) - mxx, blur(y * y) - myy, blur(x * y) - mxy
    ssim = ((2 * mxy + c1) * (2 * sxy + c2)) / ((mxx + myy + c1) * (sxx + syy + c2))
    r = SSIM_WINDOW // 2
    if min(ssim.shape[:2]) >= SSIM_WINDOW:  # keep only windows fully inside the frame
        ssim = ssim[r:-r, r:-r]
    return float(ssim.mean(dtype=np.float64))


# ------------------------------------------------------------------------------- dynamic PSNR
def real_motion(real: np.ndarray, start: int) -> np.ndarray:
    """Sum over channels of |real[t] - real[t-1]| for t = max(start, 1) .. T-1 (uint16, (N, H, W)).

    The sum is three times cosmos-framework's channel mean, so percentiles and thresholds on it
    select the same pixels.
    """
    d = np.stack([cv2.absdiff(real[t], real[t - 1]) for t in range(max(start, 1), len(real))])
    return d[..., 0].astype(np.uint16) + d[..., 1] + d[..., 2]


def dynamic_psnr(generated: np.ndarray, real: np.ndarray, *, start: int = DEFAULT_START,
                 percentile: float = DYNAMIC_PERCENTILE) -> tuple[float, np.ndarray]:
    """PSNR over the pixels whose real motion is above the clip's `percentile` (see module doc).

    Returns (clip value pooled over all dynamic pixels, per-frame values with NaN for frames
    without a dynamic pixel); the clip value is NaN when no pixel is dynamic.
    """
    motion = real_motion(real, start)
    mask = motion > np.percentile(motion, percentile)
    if start == 0:  # frame 0 has no predecessor: it takes frame 1's mask
        mask = np.concatenate([mask[:1], mask])
    count = mask.reshape(len(mask), -1).sum(axis=1)
    mse = np.full(len(mask), np.nan)  # per frame, over its dynamic pixels and the channels
    for i, t in enumerate(range(start, len(real))):
        if count[i]:
            err = cv2.absdiff(generated[t], real[t]).astype(np.float32)
            mse[i] = np.mean(cv2.mean(cv2.multiply(err, err), mask=mask[i].view(np.uint8))[:3])
    curve = psnr_from_mse(mse)
    total = int(count.sum())
    value = float(psnr_from_mse(np.nansum(mse * count) / total)) if total else math.nan
    return value, curve


# ----------------------------------------------------------------------------- motion-mask IoU
def grey_clip(clip: np.ndarray) -> np.ndarray:
    """(T, H, W) uint8 grey levels of an RGB clip (OpenCV's BT.601 weights)."""
    return np.stack([cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in clip])


def motion_masks(grey: np.ndarray, threshold: int = MOTION_THRESHOLD) -> np.ndarray:
    """(T, H, W) bool: |grey[t] - grey[t-1]| > threshold; frame 0 (no predecessor) is all False."""
    masks = np.zeros(grey.shape, dtype=bool)
    for t in range(1, len(grey)):
        masks[t] = cv2.absdiff(grey[t], grey[t - 1]) > threshold
    return masks


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = int(np.count_nonzero(a | b))
    return 1.0 if union == 0 else int(np.count_nonzero(a & b)) / union


def motion_iou(gen_masks: np.ndarray, real_masks: np.ndarray, *,
               start: int = DEFAULT_START) -> dict[str, tuple[float, np.ndarray]]:
    """Spatial and spatiotemporal IoU of two clips' motion masks over the scored frames.

    Returns {"motion_iou_spatial": (value, cumulative curve), "motion_iou_spatiotemporal":
    (value, per-frame curve)}; frame 0, which has no motion mask, is NaN in both curves.
    """
    frames = range(start, len(real_masks))
    g, r = gen_masks[start:], real_masks[start:]
    spatial_curve, per_frame = [], []
    g_any = np.zeros(g.shape[1:], dtype=bool)
    r_any = np.zeros(g.shape[1:], dtype=bool)
    for t, gt, rt in zip(frames, g, r):
        g_any |= gt
        r_any |= rt
        defined = t >= 1
        spatial_curve.append(_iou(g_any, r_any) if defined else math.nan)
        per_frame.append(_iou(gt, rt) if defined else math.nan)
    # frame 0's mask is empty in both clips, so it adds nothing to either IoU
    return {"motion_iou_spatial": (_iou(g_any, r_any), np.array(spatial_curve)),
            "motion_iou_spatiotemporal": (_iou(g, r), np.array(per_frame))}


# ------------------------------------------------------------------------- flow-warping error
def flow_warping_error(clip: np.ndarray, grey: np.ndarray | None = None, *,
                       start: int = DEFAULT_START) -> tuple[float, np.ndarray]:
    """Photometric error after warping frame t back onto frame t-1 with DIS flow (0..255 levels).

    Returns (mean over the scored frame pairs, per-frame curve: entry for frame t is the pair
    (t-1, t); NaN for frame 0 and for pairs whose flow leaves the frame everywhere). Frames
    smaller than MIN_FLOW_SIZE on a side give NaN throughout.
    `grey` (from grey_clip) may be passed to avoid recomputing it.
    """
    h, w = clip.shape[1:3]
    if min(h, w) < MIN_FLOW_SIZE:
        return math.nan, np.full(len(clip) - start, math.nan)
    grey = grey_clip(clip) if grey is None else grey
    dis = cv2.DISOpticalFlow_create(DIS_PRESET)
    xs, ys = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    curve = []
    for t in range(start, len(clip)):
        if t == 0:
            curve.append(math.nan)
            continue
        flow = dis.calc(grey[t - 1], grey[t], None)
        map_x, map_y = xs + flow[..., 0], ys + flow[..., 1]
        valid = (map_x >= 0) & (map_x <= w - 1) & (map_y >= 0) & (map_y <= h - 1)
        if not valid.any():
            curve.append(math.nan)
            continue
        warped = cv2.remap(clip[t].astype(np.float32), map_x, map_y, cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE)
        err = cv2.absdiff(warped, clip[t - 1].astype(np.float32))
        curve.append(float(np.mean(cv2.mean(err, mask=valid.view(np.uint8))[:3])))
    arr = np.array(curve)
    value = float(np.nanmean(arr)) if np.isfinite(arr).any() else math.nan
    return value, arr


# ------------------------------------------------------------------------------------- checks
def _check_clips(generated: np.ndarray, real: np.ndarray, start: int, label: str) -> None:
    for name, clip in (("generated", generated), ("real", real)):
        if not isinstance(clip, np.ndarray) or clip.dtype != np.uint8 or clip.ndim != 4 or clip.shape[-1] != 3:
            got = f"{clip.dtype} {clip.shape}" if isinstance(clip, np.ndarray) else type(clip).__name__
            raise EvaluationError(f"{label}: the {name} clip must be uint8 RGB frames (T, H, W, 3), "
                                  f"got {got}; decode the video to RGB24 first")
    if generated.shape != real.shape:
        raise EvaluationError(f"{label}: generated clip {generated.shape} and real clip {real.shape} differ "
                              "in shape; decode both at the same size and frame count")
    if not 0 <= start < len(real) or len(real) < 2:
        raise EvaluationError(f"{label}: {len(real)} frames with start={start} leave nothing to score; "
                              "pixel metrics need start < T and T >= 2")


def _finite_or_none(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)
