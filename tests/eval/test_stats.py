"""Paired differences to the base model: bootstrap CI over inputs, win rate, reasons, best model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from worldtune.eval.stats import best_models, cluster_bootstrap_ci, paired_difference


def _scores(values: np.ndarray) -> dict[tuple[str, int], float]:
    """(inputs, seeds) array -> {(input, seed): value}."""
    return {(f"ep{i}", s): float(v) for (i, s), v in np.ndenumerate(values)}


def _synthetic(rng: np.random.Generator, shift: float, n_inputs: int = 15, n_seeds: int = 3,
               input_sd: float = 0.8, pair_sd: float = 0.5) -> tuple[dict, dict]:
    """Base scores vary a lot between inputs; the model adds `shift` plus an input-level effect
    shared by all seeds of an input (correlated seeds) and pair noise."""
    difficulty = rng.normal(0, 3, (n_inputs, 1))
    base = difficulty + rng.normal(0, 1, (n_inputs, n_seeds))
    model = base + shift + rng.normal(0, input_sd, (n_inputs, 1)) + rng.normal(0, pair_sd, (n_inputs, n_seeds))
    return _scores(model), _scores(base)


def test_ci_covers_the_true_shift_at_about_the_nominal_rate():
    rng = np.random.default_rng(0)
    hits, trials = 0, 200
    for _ in range(trials):
        model, base = _synthetic(rng, shift=0.7)
        d = paired_difference(model, base, higher_is_better=True)
        assert d.ci_low <= d.mean <= d.ci_high and d.n_pairs == 45 and d.n_inputs == 15 and d.reason == ""
        hits += d.ci_low <= 0.7 <= d.ci_high
    # a percentile bootstrap over 15 clusters covers slightly below 95 %
    assert 0.88 <= hits / trials <= 0.99, hits / trials


def test_cluster_bootstrap_widens_when_seeds_of_an_input_are_correlated():
    rng = np.random.default_rng(1)
    n_inputs, n_seeds = 20, 5
    independent = rng.normal(0.3, 1.0, (n_inputs, n_seeds))
    # same total variance (0.95² + 0.31² ≈ 1), but most of it shared by the seeds of an input
    correlated = 0.3 + rng.normal(0, 0.95, (n_inputs, 1)) + rng.normal(0, 0.31, (n_inputs, n_seeds))

    def width(diffs: np.ndarray) -> float:
        d = paired_difference(_scores(diffs), _scores(np.zeros_like(diffs)), higher_is_better=True)
        return d.ci_high - d.ci_low

    assert width(correlated) > 1.5 * width(independent)
    # treating the 100 correlated pairs as independent would be far too confident
    lo, hi = cluster_bootstrap_ci([[v] for v in correlated.ravel()])
    assert width(correlated) > 1.5 * (hi - lo)


def test_constant_difference_has_a_zero_width_interval():
    base = np.arange(15.0).reshape(5, 3)
    d = paired_difference(_scores(base + 2.5), _scores(base), higher_is_better=False)
    assert (d.mean, d.ci_low, d.ci_high, d.win_rate) == pytest.approx((2.5, 2.5, 2.5, 0.0))


def test_win_rate_counts_ties_half_and_honours_direction():
    model = {("a", 0): 3.0, ("a", 1): 2.0, ("b", 0): 8.0, ("b", 1): 0.0}
    base = {("a", 0): 2.0, ("a", 1): 2.0, ("b", 0): 6.0, ("b", 1): 1.0}  # d = +1, 0, +2, -1
    up = paired_difference(model, base, higher_is_better=True)
    down = paired_difference(model, base, higher_is_better=False)
    assert up.win_rate == pytest.approx((2 + 0.5) / 4)
    assert down.win_rate == pytest.approx((1 + 0.5) / 4)
    assert up.mean == down.mean == pytest.approx(0.5)
    assert (up.n_pairs, up.n_inputs) == (4, 2)


def test_only_pairs_scored_for_both_count():
    model = {("a", 0): 1.0, ("a", 1): 5.0, ("b", 0): 2.0, ("c", 0): math.nan, ("x", 0): 100.0}
    base = {("a", 0): 0.0, ("a", 1): 4.0, ("b", 0): 1.0, ("c", 0): 1.0, ("y", 0): -100.0}
    d = paired_difference(model, base, higher_is_better=True)
    assert (d.mean, d.n_pairs, d.n_inputs, d.win_rate) == (1.0, 3, 2, 1.0)


def test_reasons_for_what_cannot_be_computed():
    model = {("a", 0): 1.0, ("a", 1): 2.0}
    none = paired_difference(model, None, higher_is_better=True)
    assert none.mean is None and none.n_pairs == 0 and "no base model" in none.reason
    disjoint = paired_difference(model, {("b", 0): 1.0}, higher_is_better=True)
    assert disjoint.mean is None and disjoint.win_rate is None and "no (input, seed) pair" in disjoint.reason
    one_input = paired_difference(model, {("a", 0): 0.0, ("a", 1): 0.0}, higher_is_better=True)
    assert one_input.mean == 1.5 and one_input.win_rate == 1.0 and one_input.n_inputs == 1
    assert one_input.ci_low is None and one_input.ci_high is None and "1 input in common" in one_input.reason
    assert one_input.to_dict()["reason"] == one_input.reason


def test_no_interval_below_five_inputs():
    """Two inputs give a bootstrap 'interval' of two possible means: none is shown, and the reason names n."""
    base = np.arange(15.0).reshape(5, 3)
    model = base + np.arange(5.0)[:, None]
    two = paired_difference(_scores(model[:2]), _scores(base[:2]), higher_is_better=True)
    four = paired_difference(_scores(model[:4]), _scores(base[:4]), higher_is_better=True)
    five = paired_difference(_scores(model), _scores(base), higher_is_better=True)
    assert two.mean == 0.5 and two.ci_low is None and two.ci_high is None and "2 inputs in common" in two.reason
    assert four.ci_low is None and "at least 5" in four.reason
    assert five.ci_low is not None and five.ci_low <= five.mean <= five.ci_high and five.reason == ""


def test_bootstrap_is_reproducible_and_seeded():
    model, base = _synthetic(np.random.default_rng(2), shift=0.2)
    a = paired_difference(model, base, higher_is_better=True)
    assert a == paired_difference(model, base, higher_is_better=True)
    assert a.ci_low != paired_difference(model, base, higher_is_better=True, seed=1).ci_low


def test_best_models_honours_direction_ties_and_missing_values():
    means = {"base": 30.1, "lora": 31.4, "dora": 31.4, "broken": None, "nan": math.nan}
    assert best_models(means, higher_is_better=True) == ["lora", "dora"]
    assert best_models(means, higher_is_better=False) == ["base"]
    assert best_models({"base": 1.0, "lora": None}, higher_is_better=True) == []


def test_evaluate_summary_fits_80_columns_and_shows_the_paired_differences(capsys):
    """A 2-input run with every metric and long labels: no cell cut short, the differences to the base printed
    with n pairs and inputs, and the missing interval explained."""
    from worldtune.eval.scores import aggregate
    from worldtune.eval.summary import print_summary

    metrics = ["sampson_temporal", "sampson_crossview", "psnr", "ssim", "dynamic_psnr", "motion_iou_spatial",
               "warp_error"]
    rows = [{"model": m, "name": n, "seed": s, **{k: 12.8 + i + j + 0.37 * s for j, k in enumerate(metrics)}}
            for i, m in enumerate(["base", "lora_step_000200_rank32", "real"]) for n in ("ep1", "ep2") for s in (0, 1)]
    for r in rows:
        r["reference"] = r["model"] == "real"
    models, _ = aggregate(rows, metrics)
    print_summary({"out": "runs/eval", "metrics": metrics, "models": models, "judge": {"status": "off"}})
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out and "(n=…" not in out
    assert "model − base" in out and "lora_step_000200_rank32" in out
    diff = out.split("model − base")[1].splitlines()
    psnr = next(line for line in diff if line.split()[:1] == ["psnr"])
    assert psnr.split() == ["psnr", "+1", "none", "100%", "4/2"]  # diff, no CI at 2 inputs, win, pairs/inputs
    assert "no interval: 2 inputs in common, a bootstrap interval needs at least 5" in " ".join(out.split())
