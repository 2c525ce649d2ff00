"""Pixel metrics against the real continuation, checked against values computed by hand."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from worldtune.errors import EvaluationError
from worldtune.eval.pixels import HIGHER_IS_BETTER, METRICS, PSNR_CAP_DB, grey_clip, pixel_metrics, ssim_curve

C1, C2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2


def _clip(t: int, h: int, w: int, value: int = 0) -> np.ndarray:
    return np.full((t, h, w, 3), value, dtype=np.uint8)


def _texture(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth random RGB texture spanning 0..255 (trackable by optical flow)."""
    noise = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return cv2.normalize(cv2.GaussianBlur(noise, (0, 0), 2.0), None, 0, 255, cv2.NORM_MINMAX)


# ---------------------------------------------------------------------------------------- PSNR
def test_psnr_by_hand_and_the_conditioning_frame_is_excluded():
    real = _clip(2, 4, 4, 100)
    gen = real.copy()
    gen[0] = 0  # the given frame: garbage here must not count with start=1
    gen[1, :2] += 2  # 24 of the 48 values off by +2 ...
    gen[1, 2:] -= 6  # ... the other 24 off by -6: MSE = (24·4 + 24·36) / 48 = 20
    m = pixel_metrics(gen, real)
    assert m.frames == [1]
    assert m.values["psnr"] == pytest.approx(10 * math.log10(255**2 / 20))
    assert m.curves["psnr"] == pytest.approx([10 * math.log10(255**2 / 20)])

    # start=0 scores frame 0 too: its MSE is 100² = 10000; the clip value is the mean of frames
    m0 = pixel_metrics(gen, real, start=0)
    assert m0.frames == [0, 1]
    expected = [10 * math.log10(255**2 / 10000), 10 * math.log10(255**2 / 20)]
    assert m0.curves["psnr"] == pytest.approx(expected)
    assert m0.values["psnr"] == pytest.approx(sum(expected) / 2)


def test_identical_frames_read_the_cap():
    real = np.stack([_texture(16, 16, s) for s in range(3)])
    m = pixel_metrics(real.copy(), real)
    assert m.curves["psnr"] == [PSNR_CAP_DB, PSNR_CAP_DB]
    assert m.values["psnr"] == PSNR_CAP_DB


# ---------------------------------------------------------------------------------------- SSIM
def test_ssim_identical_is_one_and_constant_offset_follows_the_formula():
    tex = grey_clip(np.stack([_texture(24, 24, 1), _texture(24, 24, 2)]))
    assert ssim_curve(tex, tex) == pytest.approx([1.0, 1.0], abs=1e-6)
    # constant frames a and a + c: no variance, so SSIM is the luminance term alone
    # (float32 arithmetic: agreement to 1e-4)
    a, c = 100, 20
    expected = (2 * a * (a + c) + C1) / (a**2 + (a + c) ** 2 + C1)
    flat = np.full((1, 16, 16), a, np.uint8)
    assert ssim_curve(flat, flat + c) == pytest.approx([expected], abs=1e-4)


def _local_mean(img: np.ndarray) -> np.ndarray:
    """Gaussian-weighted (11x11, sigma 1.5) mean over every window lying inside the image."""
    k = np.arange(11) - 5
    g = np.exp(-(k**2) / (2 * 1.5**2))
    window = np.outer(g, g) / g.sum() ** 2
    return np.einsum("ijkl,kl->ij", np.lib.stride_tricks.sliding_window_view(img, (11, 11)), window)


def test_ssim_matches_the_wang_formula_on_the_windows_inside_the_frame():
    x = grey_clip(_texture(24, 30, 3)[None])[0] // 2 + 20
    # textured frame + offset: σ and structure are unchanged, SSIM per window is the luminance
    # term of the local means
    mx = _local_mean(x.astype(np.float64))
    expected = np.mean((2 * mx * (mx + 60) + C1) / (mx**2 + (mx + 60) ** 2 + C1))
    assert ssim_curve(x[None], x[None] + 60)[0] == pytest.approx(expected, abs=1e-4)
    # and a general pair, against the full formula on the same windows
    z = grey_clip(_texture(24, 30, 4)[None])[0]
    a, b = x.astype(np.float64), z.astype(np.float64)
    ma, mb = _local_mean(a), _local_mean(b)
    va, vb, cov = _local_mean(a * a) - ma**2, _local_mean(b * b) - mb**2, _local_mean(a * b) - ma * mb
    full = np.mean((2 * ma * mb + C1) * (2 * cov + C2) / ((ma**2 + mb**2 + C1) * (va + vb + C2)))
    assert ssim_curve(x[None], z[None])[0] == pytest.approx(full, abs=1e-4)


def test_reported_ssim_is_the_luma_ssim_of_the_scored_frames():
    real = np.stack([_texture(24, 24, s) for s in range(3)])
    gen = np.stack([_texture(24, 24, s + 10) for s in range(3)])
    m = pixel_metrics(gen, real)
    luma = ssim_curve(grey_clip(gen)[1:], grey_clip(real)[1:])
    assert m.curves["ssim"] == pytest.approx(list(luma))
    assert m.values["ssim"] == pytest.approx(luma.mean())


# -------------------------------------------------------------------------------- dynamic PSNR
def _moving_square_clip(t: int = 4, size: int = 20, background: int = 50) -> np.ndarray:
    clip = _clip(t, size, size, background)
    for i in range(t):
        clip[i, 8:12, 2 + 4 * i: 6 + 4 * i] = 200
    return clip


def test_dynamic_psnr_ignores_the_static_background():
    real = _moving_square_clip()
    moving = np.zeros(real.shape[:3], dtype=bool)
    for t in range(1, len(real)):
        moving[t] = np.any(real[t] != real[t - 1], axis=-1)
    # 32 of 400 pixels move per frame (< 20 %): the 80th percentile is 0 and the mask is exactly them
    gen = real.copy()
    gen[moving] -= 10  # error 10 on every dynamic pixel
    value = pixel_metrics(gen, real).values["dynamic_psnr"]
    assert value == pytest.approx(10 * math.log10(255**2 / 100))

    gen2 = gen.copy()
    gen2[~moving & (real[..., 0] == 50)] = 90  # repaint the static background of the generated clip
    m, m2 = pixel_metrics(gen, real), pixel_metrics(gen2, real)
    assert m2.values["dynamic_psnr"] == m.values["dynamic_psnr"]
    assert m2.curves["dynamic_psnr"] == m.curves["dynamic_psnr"]
    assert m2.values["psnr"] < m.values["psnr"] - 5


def test_dynamic_psnr_threshold_is_the_80th_percentile_of_the_real_motion():
    real = _clip(2, 5, 10)
    real[1] = (10 * np.arange(10, dtype=np.uint8))[None, :, None]  # column x changes by 10·x
    # motion values 0..90 per column, 5 rows each: the 80th percentile (linear) is 72, so only
    # columns 8 and 9 (exactly the top 20 %) are dynamic
    gen = real.copy()
    gen[1, :, :8] += 20
    gen[1, :, 8:] -= 5
    m = pixel_metrics(gen, real)
    assert m.values["dynamic_psnr"] == pytest.approx(10 * math.log10(255**2 / 25))
    assert m.values["psnr"] == pytest.approx(10 * math.log10(255**2 / ((8 * 400 + 2 * 25) / 10)))


def test_dynamic_psnr_uses_one_threshold_per_clip():
    """A frame with only faint motion has no dynamic pixel: a per-frame percentile would mark
    its top 20 % anyway."""
    ramp = np.arange(10, dtype=np.uint8)[None, :, None]
    real = _clip(3, 5, 10)
    real[1] = 10 * ramp  # motion 10·x
    real[2] = 11 * ramp  # motion x
    # the 100 motion values: 0 (x10), 1..9 (x5 each), 10..90 (x5 each): 80th percentile = 52,
    # so frame 1 columns 6-9 are dynamic and frame 2 has none
    gen = real.copy()
    gen[1, :, :6] += 20
    gen[1, :, 6:] += 5
    gen[2] += 30
    m = pixel_metrics(gen, real)
    assert m.values["dynamic_psnr"] == pytest.approx(10 * math.log10(255**2 / 25))
    assert m.curves["dynamic_psnr"][0] == pytest.approx(10 * math.log10(255**2 / 25))
    assert math.isnan(m.curves["dynamic_psnr"][1])


def test_static_real_clip_leaves_dynamic_psnr_undefined_with_a_reason():
    real = _clip(3, 8, 8, 30)
    m = pixel_metrics(real.copy(), real)
    assert math.isnan(m.values["dynamic_psnr"])
    assert "does not move" in m.reasons["dynamic_psnr"]
    assert "too small for optical flow" in m.reasons["warp_error"] and math.isnan(m.values["warp_error"])
    d = m.to_dict()
    assert d["values"]["dynamic_psnr"] is None and d["curves"]["dynamic_psnr"] == [None, None]
    assert d["values"]["psnr"] == PSNR_CAP_DB


# ----------------------------------------------------------------------------- motion-mask IoU
def _squares(positions: list[tuple[int, int]], grey: int = 255) -> np.ndarray:
    clip = _clip(len(positions), 8, 8)
    for t, (y, x) in enumerate(positions):
        clip[t, y:y + 2, x:x + 2] = grey
    return clip


def test_motion_iou_on_hand_drawn_squares():
    real = _squares([(0, 0), (0, 2), (0, 4)])
    gen = _squares([(0, 0), (0, 2), (4, 4)])  # right at frame 1, wrong place at frame 2
    # masks (changed pixels): real 1 = rows 0-1 cols 0-3, real 2 = rows 0-1 cols 2-5;
    # gen 1 = real 1, gen 2 = rows 0-1 cols 2-3 + rows 4-5 cols 4-5 (8 px, 4 shared with real 2)
    m = pixel_metrics(gen, real)
    assert m.curves["motion_iou_spatiotemporal"] == pytest.approx([1.0, 4 / 12])
    assert m.values["motion_iou_spatiotemporal"] == pytest.approx((8 + 4) / (8 + 12))
    # OR over time: real rows 0-1 cols 0-5 (12 px), gen rows 0-1 cols 0-3 + rows 4-5 cols 4-5 (12 px)
    assert m.values["motion_iou_spatial"] == pytest.approx(8 / 16)
    assert m.curves["motion_iou_spatial"] == pytest.approx([1.0, 8 / 16])


def test_motion_threshold_is_ten_grey_levels_and_no_motion_agrees():
    real = _clip(2, 8, 8, 100)
    faint, visible = real.copy(), real.copy()
    faint[1, :4] += 10  # |Δgrey| = 10: not motion
    visible[1, :4] += 11  # 11: motion over half the frame
    assert pixel_metrics(faint, real).values["motion_iou_spatial"] == 1.0  # neither moves
    assert pixel_metrics(visible, real).values["motion_iou_spatial"] == 0.0


# -------------------------------------------------------------------------- flow-warping error
def test_flow_warping_error_is_near_zero_for_translation_and_large_for_shuffled_frames():
    canvas = _texture(120, 200, 5)
    clip = np.stack([canvas[20 + t: 100 + t, 10 + 2 * t: 130 + 2 * t] for t in range(10)])  # (1, 2) px/frame
    shuffled = clip[np.random.default_rng(0).permutation(10)]
    smooth = pixel_metrics(clip, clip).values
    jumbled = pixel_metrics(shuffled, clip).values
    unwarped = np.mean(np.abs(np.diff(clip.astype(np.float32), axis=0)))  # error with zero flow
    # the flow explains the motion: a fraction of the frame difference remains (DIS FAST is
    # accurate to ~0.1 px here; on this sharp texture that is about one grey level)
    assert smooth["warp_error"] < min(1.5, 0.1 * unwarped), (smooth, unwarped)
    assert smooth["warp_error_real"] == smooth["warp_error"]
    assert jumbled["warp_error"] > 8 * smooth["warp_error"], jumbled  # 15.1 vs 1.24 levels
    assert jumbled["warp_error_real"] == smooth["warp_error_real"]  # the reference ignores the generation

    frozen = np.repeat(clip[:1], 10, axis=0)
    assert pixel_metrics(frozen, clip).values["warp_error"] < 0.05  # why it is read beside motion IoU


def test_every_metric_has_a_curve_over_the_scored_frames_and_a_direction():
    real = np.stack([_texture(24, 32, s) for s in range(5)])
    m = pixel_metrics(real[::-1].copy(), real, start=2)
    assert m.frames == [2, 3, 4]
    assert set(m.values) == set(m.curves) == set(METRICS)
    assert all(len(c) == 3 for c in m.curves.values())
    assert set(HIGHER_IS_BETTER) | {"warp_error_real"} == set(METRICS)
    # with start=0 the first frame has no predecessor: frame-to-frame curves are undefined there
    m0 = pixel_metrics(real[::-1].copy(), real, start=0)
    assert m0.frames == [0, 1, 2, 3, 4]
    for name in ("motion_iou_spatial", "motion_iou_spatiotemporal", "warp_error", "warp_error_real"):
        assert math.isnan(m0.curves[name][0]) and not any(map(math.isnan, m0.curves[name][1:])), name
        assert m0.to_dict()["curves"][name][0] is None
    assert not any(map(math.isnan, m0.curves["dynamic_psnr"]))  # frame 0 borrows frame 1's mask
    # a real clip's warp error computed once is reused as given
    reused = pixel_metrics(real[::-1].copy(), real, start=2, real_warp_error=(7.0, np.array([7.0, 7.0, 7.0])))
    assert reused.values["warp_error_real"] == 7.0 and reused.values["warp_error"] == m.values["warp_error"]


# -------------------------------------------------------------------------------------- inputs
@pytest.mark.parametrize("gen, real, start, words", [
    (_clip(3, 8, 8), _clip(3, 8, 10), 1, "differ in shape"),
    (_clip(3, 8, 8).astype(np.float32), _clip(3, 8, 8), 1, "uint8 RGB"),
    (_clip(3, 8, 8)[..., 0], _clip(3, 8, 8)[..., 0], 1, "uint8 RGB"),
    (_clip(3, 8, 8), _clip(3, 8, 8), 3, "nothing to score"),
])
def test_bad_clips_are_refused_in_one_line(gen, real, start, words):
    with pytest.raises(EvaluationError, match=words) as err:
        pixel_metrics(gen, real, start=start, label="ep3/front")
    assert str(err.value).startswith("ep3/front:") and "\n" not in str(err.value)
