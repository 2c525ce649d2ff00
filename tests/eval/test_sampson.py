"""The Sampson metric: exact on known geometry, small on clean renders, monotone in distortion."""

from __future__ import annotations

import numpy as np
import pytest

from tests.eval.eval_scene import LAYOUT, exterior_cams, grid_frames, moving_cam, render, sine_warp
from worldtune.eval.sampson import (SampsonConfig, SampsonError, SeriesScore, VideoSource, across_videos, band,
                                    estimate_fundamental, fundamental_from_cameras, sampson_distance)
from worldtune.eval.video import write_video


def _points(n: int = 200, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3)) * [2, 2, 1.5] - [1, 0, 0]


def test_true_cameras_give_zero_error_and_jitter_raises_it_monotonically():
    a, b = exterior_cams()
    F = fundamental_from_cameras(a.K, a.R, a.t, b.K, b.R, b.t)
    X = _points()
    x0, x1 = a.project(X), b.project(X)
    assert sampson_distance(F, x0, x1).max() < 1e-6
    rng = np.random.default_rng(1)
    noise = rng.standard_normal(x1.shape)
    means = [float(np.mean(sampson_distance(F, x0, x1 + s * noise))) for s in (0.0, 0.5, 1.0, 2.0, 4.0)]
    assert all(lo < hi for lo, hi in zip(means, means[1:])), means
    # Sampson distance is a first-order geometric error: jitter of σ px gives errors of order σ
    assert 0.2 < means[2] < 1.5


def test_convention_matches_opencv_fit():
    """Our F(x0ᵀ F x1 = 0) fitted from exact correspondences agrees with the true cameras' F."""
    a, b = exterior_cams()
    X = _points(300, seed=2)
    x0, x1 = a.project(X), b.project(X)
    F, inliers = estimate_fundamental(x0, x1, SampsonConfig())
    assert inliers.mean() > 0.95
    assert np.median(sampson_distance(F, x0, x1)) < 0.05
    assert np.median(sampson_distance(F.T, x0, x1)) > 1.0  # the transposed convention would be wrong


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_sift_keypoints_land_on_the_feature_not_a_quarter_pixel_off(scale):
    """Keypoints of blobs at known positions come back where the blobs are, at full and half size.

    OpenCV's default 2x upscale inside SIFT moves every keypoint by about +0.25 px (+0.5 px at
    half size); the same offset in two views reads as epipolar error under the true F.
    """
    from worldtune.eval.correspondences import SiftMatcher

    yy, xx = np.mgrid[0:180, 0:320].astype(np.float64)
    centres = np.array([(40.0 + 60 * i, 40.0 + 50 * j) for i in range(5) for j in range(3)])
    img = np.full((180, 320), 60.0)
    for x, y in centres:
        img += 150 * np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / (2 * 5.0 ** 2))
    pts = SiftMatcher(scale=scale).detect(np.repeat(img.astype(np.uint8)[..., None], 3, axis=2)).points
    offset = pts - centres[np.argmin(((pts[:, None] - centres[None]) ** 2).sum(-1), axis=1)]
    assert len(pts) >= len(centres)
    assert np.abs(offset).max() < 0.1, offset.mean(0)


def test_demo_scene_true_F_and_estimated_metric_small():
    """On the project's demo scene (worldtune.scene.episode): true F ~0 px; the estimate < 1 px."""
    synthetic = pytest.importorskip("worldtune.scene.episode")
    ep = synthetic.SyntheticEpisode(0, 30, 0)
    c0, c1 = ep.camera("exterior_1", 0), ep.camera("wrist", 3)
    F = fundamental_from_cameras(c0.K, c0.R, c0.t, c1.K, c1.R, c1.t)
    X = np.random.default_rng(0).random((50, 3)) * [0.8, 0.6, 0.2] - [0.4, 0.3, 0.0]
    assert sampson_distance(F, c0.project(X), c1.project(X)).max() < 1e-6

    def frames(role: str) -> np.ndarray:
        return np.stack([np.asarray(ep.render_view(role, i)).reshape(ep.height, ep.width, 3) for i in range(6, 12)])

    metric = SampsonError(SampsonConfig(moving_views=("wrist",)))
    score = metric.score_views({"exterior_1": frames("exterior_1"), "wrist": frames("wrist")})
    assert "temporal:exterior_1" in score.notes  # a fixed camera has no temporal geometry
    assert score.temporal["wrist"].evaluated >= 4
    assert score.temporal["wrist"].median < 1.0 and score.overall("temporal").median < 1.0
    # wide-baseline exterior/wrist pairs rarely match on this scene: every pair is scored or counted
    cross = score.crossview["exterior_1|wrist"]
    assert cross.evaluated + cross.n_skipped == 6


def test_temporal_wobble_raises_error_monotonically():
    metric = SampsonError()
    medians = []
    for amp in (0.0, 1.0, 2.0):
        frames = np.stack([sine_warp(render(moving_cam(t)), amp, period=60, phase=1.7 * t) for t in range(4)])
        s = metric.temporal(frames, name="wrist")
        assert s.evaluated == 3 and s.n_skipped == 0
        medians.append(s.median)
    assert medians[0] < 0.3
    assert all(lo < hi for lo, hi in zip(medians, medians[1:])), medians


def test_reference_scoring_rises_with_a_warp_and_counts_textureless_frames():
    """Under the true F nothing is fitted: a non-rigid warp of one view reads at its size."""
    from worldtune.eval.correspondences import SiftMatcher

    a, b = exterior_cams()
    F = fundamental_from_cameras(a.K, a.R, a.t, b.K, b.R, b.t)
    metric = SampsonError()
    m = SiftMatcher()
    fa = [m.detect(render(a))] * 3
    medians = []
    for amp in (0.0, 1.0, 2.0, 4.0):
        fb = [m.detect(sine_warp(render(b), amp, period=50))] * 3
        medians.append(metric.crossview_reference(fa, fb, F, m, "calibrated").median)
    assert medians[0] < 0.3
    assert all(lo < hi for lo, hi in zip(medians, medians[1:])), medians
    flat = [m.detect(np.full((180, 320, 3), 90, np.uint8))] * 3
    s = metric.crossview_reference(fa, flat, F, m, "calibrated")
    assert s.evaluated == 0 and s.skipped == {"too_few_matches": 3}
    assert np.isnan(s.mean) and s.summary()["median"] is None


def test_min_inliers_guard_skips_and_counts():
    a, _ = exterior_cams()
    ia = render(a)
    strict = SampsonError(SampsonConfig(min_inliers=100_000))
    s = strict.temporal(np.stack([render(moving_cam(t)) for t in range(3)]))
    assert s.evaluated == 0 and s.skipped == {"too_few_matches": 2}
    # a static camera: no baseline, F degenerate -> counted as such, not scored ~0 px
    assert SampsonError().temporal(np.stack([ia, ia, ia])).skipped == {"static_camera": 2}


def test_aggregation_nan_aware_and_bands():
    s = SeriesScore("x", pair_means=[1.0, 3.0, float("nan")], pair_medians=[0.5, 1.5, float("nan")])
    assert s.mean == pytest.approx(2.0) and s.median == pytest.approx(1.0)
    stats = across_videos([1.0, 3.0, float("nan")])
    assert stats["n"] == 2 and stats["n_nan"] == 1 and stats["median"] == pytest.approx(2.0)
    assert [band(x) for x in (0.5, 2, 4, 9, float("nan"))] == ["excellent", "good", "fair", "poor", "n/a"]


def test_sources_corrupt_and_one_frame_videos_are_skips(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all")
    one = write_video(tmp_path / "one.mp4", render(moving_cam(0))[None], 16)
    frames = np.stack([render(moving_cam(t)) for t in range(3)])
    good = write_video(tmp_path / "good.mp4", frames, 16)
    sources = [VideoSource("bad", video=str(bad)), VideoSource("one", video=str(one)),
               VideoSource("missing", video=str(tmp_path / "nope.mp4")), VideoSource("good", video=str(good))]
    scores = SampsonError().score_many(sources, workers=2, progress=False)
    assert [s.key for s in scores] == ["bad", "one", "missing", "good"]
    assert scores[0].status.startswith("skipped: unreadable") and scores[2].status.startswith("skipped: unreadable")
    assert scores[1].status == "skipped: fewer than 2 frames"
    assert scores[3].ok and scores[3].temporal["video"].evaluated == 2
    assert scores[3].overall("temporal").median < 1.0


def test_grid_and_separate_view_sources_agree(tmp_path):
    g = grid_frames(3)
    grid = write_video(tmp_path / "grid.mp4", g, 16)
    views = {"exterior_1": g[:, :180, :320], "exterior_2": g[:, :180, 320:], "wrist": g[:, 180:, :320]}
    paths = {r: str(write_video(tmp_path / f"{r}.mp4", v, 16)) for r, v in views.items()}
    loaded_grid = VideoSource("g", video=str(grid), layout=LAYOUT).load()
    loaded_views = VideoSource("v", views=paths).load()
    assert sorted(loaded_grid) == sorted(loaded_views) == sorted(views)
    for r in views:
        assert loaded_grid[r].shape == loaded_views[r].shape == (3, 180, 320, 3)
    score = SampsonError().score_views(loaded_grid)
    assert set(score.crossview) == {"exterior_1|exterior_2", "exterior_1|wrist", "exterior_2|wrist"}
    assert score.overall("crossview").median < 1.0


def _match_plain(m, a, b):
    """SiftMatcher.match as first written: OpenCV's brute-force matcher both ways, Python loops."""
    two = m.bf.knnMatch(a.descriptors, b.descriptors, k=2)
    back = {x.queryIdx: x.trainIdx for x in m.bf.match(b.descriptors, a.descriptors)}
    pairs = [(k[0].queryIdx, k[0].trainIdx) for k in two
             if len(k) == 2 and k[0].distance < m.ratio * k[1].distance and back.get(k[0].trainIdx) == k[0].queryIdx]
    if not pairs:
        return np.empty((0, 2)), np.empty((0, 2))
    ia, ib = np.array(pairs).T
    return a.points[ia], b.points[ib]


def test_sift_matching_is_the_brute_force_matchers_to_the_bit():
    """One float32 distance matrix for both directions gives OpenCV's brute-force matches exactly:
    two views, a warped view, an H.264 round trip, tied descriptors, and descriptors that are not
    SIFT's whole numbers (those take the brute-force matcher itself)."""
    import io

    import av

    from worldtune.eval.correspondences import Features, SiftMatcher, mutual_ratio
    from worldtune.eval.video import encode_video

    a, b = exterior_cams()
    ia, ib = render(a), render(b)
    with av.open(io.BytesIO(encode_video(np.stack([ia, ib]), 15))) as c:
        ha, hb = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    m = SiftMatcher()
    fa, fb, fw, fha, fhb = (m.detect(x) for x in (ia, ib, sine_warp(ib, 2.0, period=50), ha, hb))
    tied = Features(np.concatenate([fb.points, fb.points[:20]]), np.concatenate([fb.descriptors, fb.descriptors[:20]]))
    rng = np.random.default_rng(0)
    blurred = Features(fb.points, fb.descriptors + rng.random(fb.descriptors.shape, np.float32))
    blurred_a = Features(fa.points, fa.descriptors + rng.random(fa.descriptors.shape, np.float32))
    cases = [(fa, fb), (fb, fa), (fa, fw), (fha, fhb), (fa, fa), (fa, tied), (tied, fa), (blurred_a, blurred)]
    assert len(fa.points) > 100 and len(_match_plain(m, fa, fb)[0]) > 20
    for x, y in cases:
        fast, plain = m.match(x, y), _match_plain(m, x, y)
        assert all(np.array_equal(u, v) for u, v in zip(fast, plain)), (len(fast[0]), len(plain[0]))
    best, keep = mutual_ratio(fa.descriptors, tied.descriptors, m.ratio)
    bf_best, bf_keep = m.mutual_ratio_bf(fa.descriptors, tied.descriptors)
    assert np.array_equal(keep, bf_keep) and np.array_equal(best, bf_best)  # ties: the lower index, as OpenCV


def test_distinct_is_the_plain_unique_of_rounded_rows():
    """The packed 1-D unique keeps the same first row of each group as np.unique over the rows."""
    from worldtune.eval.epipolar import distinct

    rng = np.random.default_rng(0)
    for n in (1, 7, 300):
        for spread in (5.0, 320.0, 1e12):  # the last cannot be packed: rows themselves
            x0, x1 = rng.random((n, 2)) * spread - spread / 3, rng.random((n, 2)) * spread
            x0, x1 = np.concatenate([x0, x0[::2] + 0.2]), np.concatenate([x1, x1[::2] - 0.2])  # near-duplicates
            key = np.round(np.concatenate([x0, x1], axis=1)).astype(np.int64)
            assert np.array_equal(distinct(x0, x1), np.sort(np.unique(key, axis=0, return_index=True)[1]))


def test_video_read_gives_pyav_pixels(tmp_path):
    """One RGB conversion context for a whole read: the pixels PyAV gives each frame by to_ndarray."""
    import av

    from worldtune.eval.video import read_video

    frames = grid_frames(4, wobble=1.0)
    path = write_video(tmp_path / "v.mp4", frames, 15)
    with av.open(str(path)) as c:
        plain = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    assert np.array_equal(read_video(path)[0], plain)


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_sift_keypoints_are_read_out_as_the_plain_loop_reads_them(scale):
    """cv2.KeyPoint_convert gives the keypoints' coordinates a loop over KeyPoint.pt gives (float32 to float64)."""
    import cv2

    from worldtune.eval.correspondences import SiftMatcher, gray

    a, _ = exterior_cams()
    img = render(a)
    m = SiftMatcher(scale=scale)
    g = gray(img)
    if scale != 1.0:
        g = cv2.resize(g, (round(g.shape[1] * scale), round(g.shape[0] * scale)), interpolation=cv2.INTER_AREA)
    kps, desc = m.detector.detectAndCompute(g, None)
    plain = np.array([k.pt for k in kps], np.float64).reshape(-1, 2)
    plain = plain if scale == 1.0 else (plain + 0.5) / scale - 0.5
    f = m.detect(img)
    assert len(plain) > 100 and np.array_equal(f.points, plain) and np.array_equal(f.descriptors, desc)
    assert m.detect(np.full((180, 320, 3), 90, np.uint8)).points.shape == (0, 2)  # no keypoints
