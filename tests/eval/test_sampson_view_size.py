"""benchmarks/sampson_view_size.py's chance figure: the share of random pixel pairs within the Sampson gate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.benchmark_module import load_benchmark

# a rectified pair (epipolar lines are rows): x0ᵀ F x1 = y1 - y0, whose Sampson distance is |y0 - y1| / √2
RECTIFIED = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])


@pytest.mark.parametrize("height", [64, 180])
def test_chance_share_matches_the_closed_form(height: int) -> None:
    """y0, y1 uniform on [0, H]: P(|y0 - y1| <= a) = 1 - (1 - a/H)², with a = gate x √2."""
    share = load_benchmark("sampson_view_size").chance_share(RECTIFIED, (height, 112), (height, 112), gate=6.0,
                                                             n=200_000)
    a = 6.0 * math.sqrt(2)
    assert share == pytest.approx(1 - (1 - a / height) ** 2, abs=0.005)


def test_chance_share_falls_with_the_view_size() -> None:
    """The same gate in pixels lets fewer random pairs through on a larger view (why small views read chance)."""
    chance = load_benchmark("sampson_view_size").chance_share
    assert chance(RECTIFIED, (180, 320), (180, 320), 6.0) < 0.5 * chance(RECTIFIED, (64, 112), (64, 112), 6.0)
