"""The policy-ranking statistics on cases worked by hand (a wrong formula fails them), and the prediction-powered
estimate's coverage on synthetic data whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from worldtune.eval.policy_ranking import agreement, mmrv, pearson, ppi_mean, ranks, spearman


def test_pearson_by_hand():
    # dx = [-1.5, -.5, .5, 1.5], dy = [-1.75, .25, 1.25, .25]: sum dx*dy = 3.5, sxx = 5, syy = 4.75
    assert pearson([1, 2, 3, 4], [2, 4, 5, 4]) == pytest.approx(3.5 / math.sqrt(5 * 4.75))
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) is None  # no spread: undefined, not 0


def test_spearman_gives_ties_their_mean_rank():
    assert ranks([5, 6, 7, 8, 7]).tolist() == [1, 2, 3.5, 5, 3.5]
    # Pearson of [1..5] and [1, 2, 3.5, 5, 3.5]: 8 / sqrt(10 * 9.5); the no-ties shortcut 1 - 6 sum d^2 / (n (n^2 - 1))
    # would give 0.825
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert spearman([0.1, 0.5, 0.9], [1, 20, 300]) == pytest.approx(1.0)  # only the order counts


def test_mmrv_weighs_each_policys_worst_violation_by_the_true_gap():
    assert mmrv([0.9, 0.5, 0.1], [0.95, 0.6, 0.0]) == 0.0  # the same order: no violation
    # policies 0 and 1 swapped: each has a worst violation of |0.9 - 0.5|, policy 2 none -> 0.8 / 3
    assert mmrv([0.9, 0.5, 0.1], [0.6, 0.7, 0.2]) == pytest.approx(0.8 / 3)
    # worst violations 0.9 (0 vs 2), 0.7 (1 vs 2), 0.9 (2 vs 0), 0 (3 agrees with all): a mean of pair
    # violations or an unweighted count would differ
    assert mmrv([1.0, 0.8, 0.1, 0.0], [0.1, 0.5, 0.6, 0.0]) == pytest.approx((0.9 + 0.7 + 0.9 + 0.0) / 4)
    # a world model that cannot tell two policies apart violates for the better one
    assert mmrv([0.8, 0.2], [0.5, 0.5]) == pytest.approx(0.3)


def test_agreement_reports_the_bias_per_policy():
    a = agreement(["a", "b", "c"], [1.0, 0.5, 0.0], [0.8, 0.6, 0.1])
    assert a.bias == {"a": pytest.approx(-0.2), "b": pytest.approx(0.1), "c": pytest.approx(0.1)}
    assert a.mean_abs_bias == pytest.approx(0.4 / 3) and a.mmrv == 0.0 and a.spearman == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two policies"):
        agreement(["a"], [1.0], [1.0])


def _draw(rng: np.random.Generator, k: int, p: float, false_success: float, missed: float):
    """k rollouts: the truth y ~ Bernoulli(p) and a world model's verdict that calls `false_success` of the
    failures a success and misses `missed` of the successes."""
    y = rng.random(k) < p
    flip = np.where(y, rng.random(k) < missed, rng.random(k) < false_success)
    return y.astype(float), (y ^ flip).astype(float)


def test_the_prediction_powered_interval_covers_the_truth_and_removes_a_biased_models_bias():
    """400 repeats of 20 paired and 400 world-model-only rollouts of a policy of true success 0.6, judged by a
    world model that is optimistic (E[verdict] = 0.6 * 0.9 + 0.4 * 0.3 = 0.66)."""
    rng = np.random.default_rng(0)
    p, covered, estimates, raw, saved, widths = 0.6, 0, [], [], [], []
    for _ in range(400):
        y, f = _draw(rng, 20, p, 0.3, 0.1)
        _, g = _draw(rng, 400, p, 0.3, 0.1)
        e = ppi_mean(y, f, g)
        covered += e.ci[0] <= p <= e.ci[1]
        estimates.append(e.estimate)
        raw.append(e.model_rate)
        saved.append(e.saved)
        widths.append((e.ci[1] - e.ci[0], e.classical_ci[1] - e.classical_ci[0]))
    assert covered / 400 >= 0.9
    assert abs(np.mean(raw) - 0.66) < 0.01  # the raw world-model figure is biased ...
    assert abs(np.mean(estimates) - p) < 0.01  # ... the prediction-powered one is not
    w = np.array(widths)
    assert np.mean(w[:, 0]) < np.mean(w[:, 1]) and np.median(saved) > 0  # narrower than the real rollouts alone


def test_a_world_model_that_says_nothing_saves_no_rollouts():
    """Verdicts unrelated to the truth: the estimate still covers (the rectifier carries it), but it is no
    narrower than the real rollouts alone, and the rollouts saved are not positive."""
    rng = np.random.default_rng(1)
    y = (rng.random(30) < 0.5).astype(float)
    f = (rng.random(30) < 0.5).astype(float)
    g = (rng.random(500) < 0.5).astype(float)
    e = ppi_mean(y, f, g)
    assert e.saved is not None and e.saved < 0
    assert e.ci[1] - e.ci[0] > e.classical_ci[1] - e.classical_ci[0]
    with pytest.raises(ValueError, match="at least two"):
        ppi_mean([1.0], [1.0], g)


def test_paired_rollouts_without_spread_are_flagged_degenerate():
    """Three paired rollouts, all successes the world model missed: the rectifier's variance estimate is 0, so the
    interval is the world model's spread alone (here none: [1, 1]); the estimate says so instead of passing for
    a certain one. One differing pair lifts the flag."""
    e = ppi_mean([1, 1, 1], [0, 0, 0], [0, 0, 0, 0])
    assert e.estimate == 1.0 and e.ci == (1.0, 1.0) and e.degenerate
    assert not ppi_mean([1, 1, 0], [0, 0, 0], [0, 0, 0, 0]).degenerate
