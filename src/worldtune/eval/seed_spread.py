"""What sets a model's videos: its input, or the noise seed? Distances between videos of different inputs against
distances between videos of one input under different seeds.

Why: a world model should draw what its input (first frame, instruction, actions) implies; one whose videos change
more with the noise seed than with the input has learned a prior, not the input's consequences. Per model:

- **the distance** of two videos: the mean over frames after the first, camera views and pixels of
  |(a_t - a_0) - (b_t - b_0)| in grey levels (0-255): how differently the two move and change from their own first
  frame. Motion, not looks: videos of different inputs start from different frames, and that difference alone would
  make any model, even one that holds its first frame, look input-driven;
- **across inputs**: the mean distance over pairs of videos of different inputs; **across seeds**: over pairs of
  videos of one input made with different seeds;
- **the ratio** across inputs / across seeds, > 1 where the input sets the video more than the seed does, with a 95 %
  percentile bootstrap interval that resamples inputs (both means recomputed on each draw; pairs of one input drawn
  twice are not counted as pairs of different inputs). It needs at least two inputs with two seeds, and gives an
  interval from worldtune.eval.stats.MIN_CI_INPUTS inputs with two seeds on.

A model with one seed per input gets the reason instead (`worldtune demo --seed-inputs` generates a second seed).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from worldtune.errors import WorldtuneError
from worldtune.eval.stats import BOOTSTRAP_SEED, CI_LEVEL, MIN_CI_INPUTS, N_BOOT

Views = dict[str, np.ndarray]  # role -> (T, h, w, 3) uint8


def motion(views: Views) -> dict[str, np.ndarray]:
    """Per view, each frame after the first minus the first (float32): what the video changes."""
    return {r: v[1:].astype(np.float32) - v[:1].astype(np.float32) for r, v in views.items() if len(v) > 1}


def distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Mean |Δa - Δb| over the views both have (frames cut to the shorter): module doc."""
    roles = sorted(set(a) & set(b))
    if not roles:
        raise ValueError("two videos with no camera view in common")
    out = []
    for r in roles:
        n = min(len(a[r]), len(b[r]))
        if a[r].shape[1:] != b[r].shape[1:]:
            raise ValueError(f"view {r}: frames of {a[r].shape[1:3]} and {b[r].shape[1:3]} cannot be compared")
        out.append(float(np.abs(a[r][:n] - b[r][:n]).mean()))
    return float(np.mean(out))


def spread(names: Sequence[str], load: Callable[[int], Views], n_boot: int = N_BOOT,
           seed: int = BOOTSTRAP_SEED, level: float = CI_LEVEL) -> dict[str, Any]:
    """The figure for one model's videos: `names[i]` is video i's input, `load(i)` its views (module doc)."""
    inputs = sorted(set(names))
    idx = {n: j for j, n in enumerate(inputs)}
    code = np.array([idx[n] for n in names], int)
    m = len(names)
    seeded = [n for n in inputs if int((code == idx[n]).sum()) >= 2]
    out: dict[str, Any] = {"videos": m, "inputs": len(inputs), "inputs_with_seeds": len(seeded),
                           "across_inputs": None, "across_seeds": None, "ratio": None, "ci_low": None, "ci_high": None}
    if len(inputs) < 2 or len(seeded) < 2:
        return {**out, "reason": f"needs two inputs with two noise seeds or more ({len(seeded)} here): generate more "
                                 "seeds (generate.seeds, or worldtune demo --seed-inputs)"}
    moves = [motion(load(i)) for i in range(m)]
    D = np.zeros((m, m))
    for i in range(m):
        for j in range(i + 1, m):
            D[i, j] = D[j, i] = distance(moves[i], moves[j])
    # per input pair (p, q): sum of distances and count of video pairs, so a bootstrap draw is a weighted sum
    k = len(inputs)
    S, C = np.zeros((k, k)), np.zeros((k, k))
    iu = np.triu_indices(m, 1)
    np.add.at(S, (code[iu[0]], code[iu[1]]), D[iu])
    np.add.at(C, (code[iu[0]], code[iu[1]]), 1)
    S, C = S + S.T - np.diag(np.diag(S)), C + C.T - np.diag(np.diag(C))

    def ratio(w: np.ndarray) -> tuple[float, float, float]:
        ww = np.outer(w, w)
        np.fill_diagonal(ww, 0.0)  # an input drawn twice is not two inputs
        across = float((ww * S).sum() / max((ww * C).sum(), 1e-12))
        within = float((w * np.diag(S)).sum() / max((w * np.diag(C)).sum(), 1e-12))
        return across, within, across / within if within > 0 else float("nan")

    across, within, r = ratio(np.ones(k))
    out.update(across_inputs=across, across_seeds=within, ratio=r if np.isfinite(r) else None)
    if not np.isfinite(r):
        return {**out, "reason": "its videos do not change with the seed: no ratio"}
    if len(seeded) < MIN_CI_INPUTS:
        return {**out, "reason": f"no interval with {len(seeded)} inputs with two seeds (at least {MIN_CI_INPUTS})"}
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        w = np.bincount(rng.integers(0, k, k), minlength=k).astype(np.float64)
        if (w * np.diag(C)).sum() == 0 or (np.outer(w, w) * C).sum() - (w * w * np.diag(C)).sum() == 0:
            continue  # a draw with no seed pair or no pair of inputs says nothing
        if np.isfinite(d := ratio(w)[2]):
            draws.append(d)
    lo, hi = np.percentile(draws, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return {**out, "ci_low": float(lo), "ci_high": float(hi), "reason": ""}


def summary(rows: Sequence[dict[str, Any]], load: Callable[[dict[str, Any]], Views]) -> dict[str, Any]:
    """results.json's `input_vs_seed`: the figure per model (not the real clips, one per input, nor the baselines,
    which ignore the seed: the first frame held reads 0 across seeds and across inputs alike)."""
    models: dict[str, Any] = {}
    for label in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == label and r.get("seed") is not None]
        if not mine or any(r.get("reference") or r.get("baseline") for r in mine):
            continue
        counts = np.unique([r["name"] for r in mine], return_counts=True)[1]
        if (counts >= 2).sum() < 2:  # the reason, without reading a video
            models[label] = spread([r["name"] for r in mine], lambda i: {})
            continue
        views, names, unreadable = [], [], 0
        for r in mine:
            try:
                views.append(load(r))
                names.append(r["name"])
            except WorldtuneError:  # a video no other metric could read either: left out, counted
                unreadable += 1
        try:
            models[label] = spread(names, lambda i: views[i])
        except ValueError as e:
            models[label] = {"reason": f"cannot compare its videos: {e}"}
        if unreadable:
            models[label]["unreadable"] = unreadable
    return {"unit": "grey levels (0-255), mean |change since the first frame| difference", "models": models}
