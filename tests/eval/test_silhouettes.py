"""Epipolar tangency of silhouettes (worldtune.eval.silhouettes) on drawn masks with a known F."""

from __future__ import annotations

import cv2
import numpy as np

from worldtune.eval.silhouettes import AT_BORDER, EPIPOLE_IN_SILHOUETTE, NO_MOVING_PIXELS, frame_tangency

H, W = 120, 200
RECTIFIED = np.array([[0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])  # x_aᵀ F x_b = 0 <=> y_a = y_b: epipoles at infinity


def disc(cx: float, cy: float, r: int = 15) -> np.ndarray:
    m = np.zeros((H, W), np.uint8)
    cv2.circle(m, (int(cx), int(cy)), r, 1, -1)
    return m.astype(bool)


def test_rectified_pair_reads_a_vertical_offset_and_not_a_horizontal_one():
    """Epipole at infinity: the tangents are the top and bottom rows; moving the blob along the lines
    (a change of depth) reads 0, moving it d px across them reads d/√2 on both tangents."""
    a = disc(80, 60)
    assert np.allclose(frame_tangency(a, disc(120, 60), RECTIFIED).distances, 0)
    f = frame_tangency(a, disc(80, 64), RECTIFIED)
    assert f.reason is None and len(f.distances) == 2 and np.allclose(f.distances, 4 / np.sqrt(2)), f


def through(e: tuple[float, float]) -> np.ndarray:
    """F = [e]x: two views whose epipolar lines are the lines through the image point e (both epipoles at e)."""
    x, y = e
    return np.array([[0, -1.0, y], [1.0, 0, -x], [-y, x, 0]])


def test_finite_epipole_beside_the_image():
    """Epipole left of the image: the same silhouette in both views reads ~0, one moved 8 px across
    the lines reads several px."""
    F, a = through((-150.0, 60.0)), disc(80, 60)
    same = frame_tangency(a, a, F)
    assert same.reason is None and len(same.distances) == 2 and same.distances.max() < 0.5, same
    moved = frame_tangency(a, disc(80, 68), F)
    assert moved.reason is None and moved.distances.min() > 3, moved


def test_cut_empty_and_surrounding_silhouettes_are_counted_not_scored():
    top = disc(80, 5)  # leaves the image at the top: its upper tangent is on the border
    f = frame_tangency(top, top, RECTIFIED)
    assert f.reason is None and len(f.distances) == 1 and f.dropped == [AT_BORDER], f
    assert frame_tangency(np.zeros((H, W), bool), disc(80, 60), RECTIFIED).reason == NO_MOVING_PIXELS
    assert frame_tangency(disc(80, 60), disc(80, 60), through((80.0, 60.0))).reason == EPIPOLE_IN_SILHOUETTE


def _moving_mask_plain(frame, static, s):
    """moving_mask as first written (channel max by max(axis=2), big blobs by np.isin): the fast one must match it."""
    diff = cv2.GaussianBlur(np.abs(frame.astype(np.float32) - static).max(axis=2), (3, 3), 0.8)
    m = (diff > max(s.threshold, s.noise_factor * 1.4826 * float(np.median(diff)))).astype(np.uint8)
    m = cv2.morphologyEx(m, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    m = cv2.morphologyEx(m, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (5, 5)))
    _, labels, stats, _ = cv2.connectedComponentsWithStats(m)
    big = np.flatnonzero(stats[:, cv2.CC_STAT_AREA] >= s.min_area * m.size)
    return np.isin(labels, big[big > 0])


def test_background_and_moving_mask_are_the_plain_computations():
    """Textured background with noise, a large and a tiny moving blob: the median np.median gives, and the
    same moving pixels as the plain code, at the absolute level and at the noise-driven one."""
    from worldtune.eval.silhouettes import SilhouetteSettings, background, moving_mask

    rng = np.random.default_rng(0)
    scene = rng.integers(40, 200, (H, W, 3)).astype(np.float64)
    frames = []
    for t in range(9):
        f = scene + rng.normal(0, 1 if t % 2 else 12, scene.shape)  # quiet and noisy frames: both levels
        f[30:60, 20 + 10 * t:50 + 10 * t] = [250, 30, 30]
        f[100:102, 150:152] = 0  # below min_area
        frames.append(np.clip(f, 0, 255).astype(np.uint8))
    frames = np.stack(frames)
    static = background(frames)
    for n in (1, 2, 8, 9):  # odd and even lengths: np.median's value, the mean of the two middle ones
        assert np.array_equal(background(frames[:n]), np.median(frames[:n], axis=0).astype(np.float32))
    for s in (SilhouetteSettings(), SilhouetteSettings(threshold=5.0, min_area=0.0)):
        for f in frames:
            assert np.array_equal(moving_mask(f, static, s), _moving_mask_plain(f, static, s))
