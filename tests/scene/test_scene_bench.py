"""benchmarks/scene_policies_bench.py: at tiny size, its figures add up; at full size (slow), they clear the bar."""

from __future__ import annotations

import pytest

from tests.benchmark_module import load_benchmark


def test_the_benchmark_counts_and_rates_add_up():
    bench = load_benchmark("scene_policies_bench")
    out = bench.run(episodes=3, height=48, width=80)
    policies = out["policies"]
    assert len(policies) >= 6 and out["detector"]["rollouts"] == 3 * len(policies)
    for p in policies.values():
        assert p["success_rate"] == p["successes"] / 3 and p["ci95"][0] <= p["success_rate"] <= p["ci95"][1]
    assert policies["expert"]["successes"] == 3 and policies["random"]["successes"] == 0
    assert sum(out["detector"]["confusion"].values()) == out["detector"]["rollouts"]
    confusion = out["detector"]["confusion"]
    assert out["detector"]["agree"] == confusion["true_pos"] + confusion["true_neg"]
    assert bench.spearman([1, 2, 2, 3], [1, 2, 2, 3]) == 1.0 and bench.spearman([1, 2, 3], [3, 2, 1]) == -1.0


@pytest.mark.slow
def test_the_panel_spreads_and_the_detector_agrees_on_400_rollouts():
    """The bar the simulator's figures must clear: >= 6 policies of >= 50 episodes whose true rates spread by
    >= 0.6, and the detector agreeing with the simulator on >= 95 % of >= 300 rollouts (seeds not tuned on)."""
    out = load_benchmark("scene_policies_bench").run(episodes=50, first_seed=20000)
    assert len(out["policies"]) >= 6 and out["episodes_per_policy"] >= 50 and out["spread"] >= 0.6
    assert out["detector"]["rollouts"] >= 300 and out["detector"]["accuracy"] >= 0.95
    assert out["detector"]["confusion"]["false_pos"] <= 2
