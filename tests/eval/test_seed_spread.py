"""Across inputs vs across noise seeds (worldtune.eval.seed_spread) on hand-made videos: ones that vary only with the
seed, only with the input, and ones whose inputs differ only in their first frame's looks (motion set by the seed).
A distance on raw pixels, or a ratio turned upside down, fails the last or the first two."""

from __future__ import annotations

import numpy as np
import pytest

from worldtune.eval import seed_spread as sp

T, H, W = 6, 8, 10


def _video(first: float, motion_of: int, views: tuple[str, ...] = ("a", "b")) -> dict[str, np.ndarray]:
    """A clip starting at grey level `first` whose changes follow a pattern drawn from `motion_of`."""
    rng = np.random.default_rng(motion_of)
    steps = rng.uniform(-40, 40, (T, H, W, 1)) * np.arange(T)[:, None, None, None] / T
    return {v: np.clip(first + steps, 0, 255).repeat(3, -1).astype(np.uint8) for v in views}


def _figure(make, inputs: int = 8, seeds: int = 2) -> dict:
    names, videos = [], []
    for i in range(inputs):
        for s in range(seeds):
            names.append(f"in{i}")
            videos.append(make(i, s))
    return sp.spread(names, lambda j: videos[j], n_boot=400)


def test_videos_set_by_the_seed_read_below_one():
    f = _figure(lambda i, s: _video(100, 1000 + s))  # every input: the same video per seed
    assert f["across_seeds"] > 5 and f["ratio"] < 0.7 and f["ci_high"] < 1.0


def test_videos_set_by_the_input_read_above_one():
    f = _figure(lambda i, s: _video(100, i))  # the seed changes nothing
    assert f["across_seeds"] == 0 and f["ratio"] is None and "do not change with the seed" in f["reason"]
    g = _figure(lambda i, s: _video(100, i) if s == 0 else {k: np.clip(v.astype(int) + (np.arange(T) > 0)[:, None, None, None]
                                                                        * 3, 0, 255).astype(np.uint8)
                                                             for k, v in _video(100, i).items()})
    assert g["ratio"] > 3 and g["ci_low"] > 1.0


def test_first_frames_alone_do_not_make_videos_input_driven():
    """Inputs that differ only in how their first frame looks, motion set by the seed: motion, not looks, is compared."""
    f = _figure(lambda i, s: _video(60 + 15 * i, 1000 + s))
    assert f["ratio"] < 0.7


def test_too_few_seeded_inputs_give_the_reason():
    one = _figure(lambda i, s: _video(100, 1000 + s), inputs=6, seeds=1)
    assert one["ratio"] is None and "two noise seeds" in one["reason"]
    names = [f"in{i}" for i in range(6)] + ["in0", "in1", "in2"]
    few = sp.spread(names, lambda j: _video(100, j), n_boot=50)
    assert few["ratio"] is not None and few["ci_low"] is None and "at least 5" in few["reason"]


def test_views_must_match():
    with pytest.raises(ValueError, match="no camera view in common"):
        sp.distance(sp.motion(_video(1, 1, ("a",))), sp.motion(_video(1, 1, ("b",))))


def test_summary_skips_the_real_clips_and_baselines():
    rows = [{"model": m, "name": f"in{i}", "seed": s, "reference": m == "real", "baseline": m == "first_frame"}
            for m in ("base", "first_frame", "real") for i in range(5) for s in ((None,) if m == "real" else (0, 1))]
    out = sp.summary(rows, lambda r: _video(100, 1000 + (r["seed"] or 0)))
    assert list(out["models"]) == ["base"] and out["models"]["base"]["ratio"] < 0.7
