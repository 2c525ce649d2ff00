"""benchmarks/codec_level_spread.py: a one-level nudge of a few values, and what worldtune's writer makes of it."""

from __future__ import annotations

import json

import numpy as np

from tests.benchmark_module import load_benchmark


def test_nudge_moves_that_many_values_by_one_level() -> None:
    bench = load_benchmark("codec_level_spread")
    clip = np.full((3, 8, 10, 3), 255, np.uint8)
    clip[1] = 7
    nudged = bench.nudge(clip, 5, np.random.default_rng(0))
    diff = np.abs(nudged.astype(int) - clip.astype(int))
    assert diff.max() == 1 and 1 <= (diff > 0).sum() <= 5  # two draws may land on one value
    assert (nudged[clip == 255] <= 255).all() and nudged.dtype == np.uint8  # 255 moves down, never wraps to 0


def test_an_unchanged_clip_reads_back_identical_and_a_case_is_recorded(tmp_path) -> None:
    """No nudge: the one-thread writer gives the same frames every trial (the spread is the nudge's, not noise)."""
    bench = load_benchmark("codec_level_spread")
    clip = bench.scene_clip(32, 48, 5)
    assert clip.shape == (5, 32, 48, 3) and clip.std() > 5  # the scene, not a blank frame
    r = bench.spread(clip, trials=2, values=0, crf=18)
    assert r["identical"] == 2 and r["max_levels_range"] == [0, 0]
    out = bench.main(["--sizes", "32x48", "--frames", "5", "--values", "0,400", "--trials", "2",
                      "--json", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text())["cases"] == json.loads(json.dumps(out["cases"]))
    assert set(out["cases"]) == {"32x48, 0 values", "32x48, 400 values"}
    moved = out["cases"]["32x48, 400 values"]
    assert moved["identical"] < 2 and moved["max_levels_range"][1] >= 1  # 400 of 23,040 values: the codec shows it
