"""benchmarks/scene_policies_bench.py at tiny size: the figures it writes add up."""

from __future__ import annotations

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
