"""How far a world model's verdicts on a panel of policies can be trusted: agreement with true success rates, and
true success estimated from many world-model rollouts and a few real ones.

Why: a world model used to evaluate policies is right if it ranks them as reality does (the field's paired
evaluations: SIMPLER reports Pearson correlation and MMRV between simulated and real success over a panel of
policies), and useful beyond ranking if its cheap verdicts, corrected by a few real rollouts, estimate real
success more tightly than the real rollouts alone (prediction-powered inference, Angelopoulos et al. 2023).
Here "real" is whatever holds the truth: worldtune's scene simulator in its own benchmark, a robot elsewhere.

Agreement, over the policies' success rates `truth` (real) and `model` (world model):

- Pearson r: the linear correlation of the rates; Spearman rho: Pearson's r of their ranks (ties get the mean
  rank), so only the order counts.
- MMRV, mean maximum rank violation (SIMPLER's definition): policies i and j violate the ranking when the world
  model orders them otherwise than the truth, (model_i > model_j) != (truth_i > truth_j), and the violation
  weighs |truth_i - truth_j|, how far apart they really are; MMRV = mean over i of the largest violation
  involving i. 0 is a perfect order; a swap of two policies of nearly equal true success costs little, a swap
  of a good and a bad one costs their gap.
- bias per policy: model - truth.

Prediction-powered estimate of one policy's true success, from n paired rollouts (the world model's verdict
f_i and the truth y_i, from the same start) and N rollouts in the world model alone (verdicts f~_j):

    theta_pp = mean(f~) + mean(y - f),     var = var(f~) / N + var(y - f) / n,

the interval theta_pp +- z sqrt(var) (the CLT interval of the paper's mean estimation). The world model's
verdicts carry the estimate, the paired rollouts remove their bias (the "rectifier" mean(y - f)). The classical
estimate uses the n real rollouts alone (mean(y), its CLT interval, and its Wilson interval as a reference).
`real_equivalent` is how many real rollouts the classical estimate needs for an interval as narrow as the
prediction-powered one, var(y) / var_pp; minus n, the real rollouts it saved (negative: the world model's
verdicts cost precision, as they do when they disagree with the truth more than the truth varies).

The CLT interval needs paired rollouts that vary: when every paired difference y - f is the same (a handful of
rollouts, all agreeing or all disagreeing), its variance estimate is 0 and the interval shows only the world
model's own spread, too narrow. Such an estimate is flagged `degenerate`; pair more rollouts before reading it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

from worldtune.eval.stats import CI_LEVEL


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r; None when either has no spread (the correlation is undefined)."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    _same_length(a, b)
    da, db = a - a.mean(), b - b.mean()
    den = math.sqrt(float((da * da).sum() * (db * db).sum()))
    return None if den == 0 else float((da * db).sum() / den)


def ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing the mean of the ranks they span."""
    a = np.asarray(x, float)
    order = np.argsort(a, kind="stable")
    r = np.empty(len(a))
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and a[order[j + 1]] == a[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson's r of the ranks (mean ranks for ties)."""
    return pearson(ranks(x), ranks(y))


def mmrv(truth: Sequence[float], model: Sequence[float]) -> float:
    """Mean maximum rank violation of `model`'s order against `truth`'s (see the module doc)."""
    t, m = np.asarray(truth, float), np.asarray(model, float)
    _same_length(t, m)
    worst = []
    for i in range(len(t)):
        violated = (m[i] > m) != (t[i] > t)
        worst.append(float(np.max(np.abs(t[i] - t) * violated)))
    return float(np.mean(worst))


@dataclass
class Agreement:
    """How a world model's success rates over a panel agree with the true ones."""

    policies: int
    pearson: float | None
    spearman: float | None
    mmrv: float
    bias: dict[str, float]  # policy: model - truth
    mean_abs_bias: float


def agreement(names: Sequence[str], truth: Sequence[float], model: Sequence[float]) -> Agreement:
    """Pearson r, Spearman rho, MMRV and the per-policy bias of `model`'s rates against `truth`'s."""
    t, m = np.asarray(truth, float), np.asarray(model, float)
    _same_length(t, m)
    if len(names) != len(t) or len(t) < 2:
        raise ValueError(f"agreement: {len(names)} names for {len(t)} rates; at least two policies are needed")
    bias = {n: round(float(b), 6) for n, b in zip(names, m - t)}
    return Agreement(len(t), pearson(t, m), spearman(t, m), mmrv(t, m), bias, float(np.mean(np.abs(m - t))))


@dataclass
class PPIEstimate:
    """One policy's true success from paired and world-model-only rollouts (see the module doc)."""

    n: int  # paired rollouts (world model and truth from the same start)
    N: int  # world-model-only rollouts
    model_rate: float  # the raw world-model figure: mean of the N verdicts
    rectifier: float  # mean(truth - verdict) over the n paired
    estimate: float  # model_rate + rectifier
    ci: tuple[float, float]  # clipped to [0, 1]
    classical: float  # mean of the n true outcomes
    classical_ci: tuple[float, float]  # its CLT interval, clipped to [0, 1]
    real_equivalent: float | None  # real rollouts the classical estimate needs for the PPI interval's width
    saved: float | None  # real_equivalent - n
    degenerate: bool  # the paired differences do not vary: the interval leaves out the correction's uncertainty

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def ppi_mean(paired_truth: Sequence[float], paired_model: Sequence[float], model_only: Sequence[float],
             level: float = CI_LEVEL) -> PPIEstimate:
    """The prediction-powered estimate of a mean (a success rate: outcomes 0/1) with its CLT interval."""
    y, f, g = (np.asarray(v, float) for v in (paired_truth, paired_model, model_only))
    _same_length(y, f)
    n, big = len(y), len(g)
    if n < 2 or big < 2:
        raise ValueError(f"ppi_mean: {n} paired and {big} world-model-only rollouts; at least two of each")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    rect = float((y - f).mean())
    est = float(g.mean()) + rect
    var = float(g.var(ddof=1)) / big + float((y - f).var(ddof=1)) / n
    half = z * math.sqrt(var)
    classical = float(y.mean())
    var_y = float(y.var(ddof=1))
    c_half = z * math.sqrt(var_y / n)
    equivalent = var_y / var if var > 0 and var_y > 0 else None
    return PPIEstimate(n, big, float(g.mean()), rect, est, _clip(est - half, est + half), classical,
                       _clip(classical - c_half, classical + c_half), equivalent,
                       None if equivalent is None else equivalent - n, bool(np.ptp(y - f) == 0))


def _clip(lo: float, hi: float) -> tuple[float, float]:
    return max(0.0, lo), min(1.0, hi)


def _same_length(a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"two sequences of the same length are needed, got {a.shape} and {b.shape}")
