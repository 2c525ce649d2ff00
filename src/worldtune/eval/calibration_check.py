"""Is a user's calibration right for this clip? The evidence for and against a calibrated fundamental matrix.

A calibration comes from outside the clip, so it is dropped only on evidence against it: across a wide baseline
over a plain table SIFT may find no correct match at all, and a right calibration must not be dropped for that.
The clip's distinct matches, pooled over its frames, are asked first whether they fix a geometry of their own
(a guarded fit puts many more of them on its lines than the calibration does, far beyond chance): that is
evidence against it, however many matches lie on its lines by chance or near its epipole. Otherwise they are set
against chance (the same matches re-paired at random); without enough of them, the real clip's moving silhouettes
decide, and with neither the calibration is kept and marked unverified, with the reason.
`SampsonError.prove` (worldtune.eval.sampson) asks this for every calibrated pair.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from worldtune.eval.correspondences import Features, SiftMatcher
from worldtune.eval.epipolar import FitSettings, distinct, guarded_fit, robust_fundamental, sampson_distance
from worldtune.eval.silhouettes import silhouette_tangency

TIGHT = 0.5  # calibration check: a correct match lies this close (px) to a right calibration's lines
CHANCE_DRAWS = 20  # calibration check: random re-pairings the chance level is averaged over
# calibration check: matches on its lines this unlikely by chance are evidence for it (at 0.01, a camera turned 8°
# passed with 4 matches where chance gives 0.6, on the 78° pair through AV1 CRF 35)
CHANCE_P = 0.001
FIT_CHANCE_DRAWS = 3  # calibration check: robust fits to random re-pairings (the most inliers they reach is chance)
SILHOUETTE_AGAINST = 2.0  # calibration check, no matches to judge: silhouettes this far off (px) contradict it


def calibration_evidence(F: np.ndarray, fa: Sequence[Features], fb: Sequence[Features], matcher: SiftMatcher,
                         fit: FitSettings, min_inliers: int, frames: tuple[np.ndarray, np.ndarray] | None,
                         steps: Sequence[int] | None,
                         sizes: tuple[tuple[int, int], tuple[int, int]] | None = None) -> tuple[str, str, dict[str, Any]]:
    """("agrees" | "disagrees" | "unverified", why, figures) for a calibrated F against the real clip.

    On the clip's distinct matches, pooled over all frames, asked in this order:
    - *against*: a robust fit to the matches that passes the fit guards (inliers spread over the image,
      epipoles outside them: not a degenerate fit to look-alike matches) puts at least `min_inliers`
      more of them within `TIGHT` px than a fit to the matches re-paired at random does, and the
      calibration fewer than half as many: the clip's correct matches fix a geometry that is not the
      calibration's. Asked first: a calibration a few degrees off still has more matches on its lines
      than chance (where its lines cross the true ones), which says nothing for it beside a fit that
      explains several times as many;
    - *for*: more of them lie within `TIGHT` px of the calibration's epipolar lines than chance puts
      there (the same matches re-paired at random, measured under the same F): Poisson tail < `CHANCE_P`,
      and at least half as many as a robust fit to them puts on its own lines: the calibration explains
      the matches about as well as the best geometry they have (a wrong calibration beats chance with a
      few structured wrong matches, or where its lines cross the true ones, but not a fit);
    - neither (too few correct matches to judge): the moving silhouettes of the real clip
      (worldtune.eval.silhouettes) under F; their median beyond `SILHOUETTE_AGAINST` px on most
      frames is evidence against, else the calibration is kept, marked unverified, with the reason.
    `fit` and `min_inliers` are the scorer's robust-fit settings, `steps` the frames the silhouettes are read on,
    `sizes` the two views' (height, width) for the spread guard (None: that guard is not asked)."""
    figures = match_evidence(F, fa, fb, matcher, fit, sizes)
    k_tight, chance = figures["matches_within_0.5px"], figures["by_chance_within_0.5px"]
    fitted, fitted_chance, n = figures["matches_fitting_the_clip"], figures["fitting_by_chance"], figures["clip_matches"]
    if figures["clip_fit_guard"] is None and fitted >= min_inliers + fitted_chance and k_tight < 0.5 * fitted:
        return "disagrees", (f"{fitted} of its {n} distinct matches fit one geometry ({fitted_chance} when "
                             f"re-paired at random), {k_tight} the calibration (within {TIGHT} px)"), figures
    if k_tight >= 3 and poisson_tail(k_tight, chance) < CHANCE_P and k_tight >= 0.5 * fitted:
        return "agrees", "", figures
    why = (f"too few correct matches to check it: {k_tight} of {n} distinct matches lie within {TIGHT} px of its "
           f"epipolar lines ({chance:.1f} by chance), {fitted} of a fit to them ({fitted_chance} when re-paired at "
           "random)")
    if frames is not None and steps:
        sil = silhouette_tangency(frames[0], frames[1], F, steps)
        vals = [float(np.median(f.distances)) for f in sil if f.reason is None]
        figures["silhouette_frames"], figures["silhouette_median_px"] = len(vals), _finite_or_none(_nanmedian(vals))
        if len(vals) >= 0.5 * len(steps) and _nanmedian(vals) > SILHOUETTE_AGAINST:
            return "disagrees", (f"{why}; the moving silhouettes of the real clip lie {_nanmedian(vals):.1f} px "
                                 f"from its epipolar tangents (> {SILHOUETTE_AGAINST} px)"), figures
    return "unverified", why + ("; values scored under it rest on a calibration the real clip could not "
                                "check, and frames without matches that agree with it are skipped "
                                "(`matches_off_reference`)"), figures


def match_evidence(F: np.ndarray, fa: Sequence[Features], fb: Sequence[Features], matcher: SiftMatcher,
                   fit: FitSettings, sizes: tuple[tuple[int, int], tuple[int, int]] | None = None) -> dict[str, Any]:
    """What a clip's matches, pooled over its frames (each distinct one once), say about an F: how many lie
    within `TIGHT` px of its lines and how many chance puts there (the matches re-paired at random, averaged
    over `CHANCE_DRAWS`); how many a robust fit to them puts within `TIGHT` px, and the most a robust fit to
    re-paired matches does (over `FIT_CHANCE_DRAWS`), and whether that fit fails a guard (`clip_fit_guard`: the
    reason, e.g. `epipole_in_inliers`, or None; `sizes` (height, width) per view for the spread guard).
    Keys as in results.json's rig checks."""
    m = [matcher.match(a, b) for a, b in zip(fa, fb)]
    x0 = np.concatenate([p[0] for p in m]) if m else np.empty((0, 2))
    x1 = np.concatenate([p[1] for p in m]) if m else np.empty((0, 2))
    keep = distinct(x0, x1)
    x0, x1 = x0[keep], x1[keep]
    rng = np.random.default_rng(0)
    chance = float(np.mean([(sampson_distance(F, x0, x1[rng.permutation(len(x1))]) <= TIGHT).sum()
                            for _ in range(CHANCE_DRAWS)])) if len(x0) else 0.0
    shuffled = [x1[rng.permutation(len(x1))] for _ in range(FIT_CHANCE_DRAWS)]
    return {"clip_matches": int(len(x0)), "matches_within_0.5px": int((sampson_distance(F, x0, x1) <= TIGHT).sum()),
            "by_chance_within_0.5px": round(chance, 2),
            "matches_fitting_the_clip": _within(robust_fundamental(x0, x1, fit), x0, x1, TIGHT),
            "fitting_by_chance": max((_within(robust_fundamental(x0, y, fit), x0, y, TIGHT) for y in shuffled), default=0),
            "clip_fit_guard": _fit_guard(x0, x1, fit, sizes)}


def _fit_guard(x0: np.ndarray, x1: np.ndarray, fit: FitSettings,
               sizes: tuple[tuple[int, int], tuple[int, int]] | None) -> str | None:
    """Why a robust fit to the clip's matches is no evidence (a fit guard it fails), or None when it passes."""
    if sizes is None:
        fit, sizes = replace(fit, min_cells=0), ((1, 1), (1, 1))
    (ha, wa), (hb, wb) = sizes
    return guarded_fit(x0, x1, (wa, ha), (wb, hb), fit).reason


def _within(fit: tuple[np.ndarray, np.ndarray] | None, x0: np.ndarray, x1: np.ndarray, px: float) -> int:
    """How many matches lie within `px` of a fitted F's epipolar lines (0 without a fit)."""
    return int((sampson_distance(fit[0], x0, x1) <= px).sum()) if fit is not None else 0


def poisson_tail(k: int, lam: float) -> float:
    """P(X >= k) for X ~ Poisson(lam): how likely chance alone puts k matches or more on a calibration's lines."""
    if k <= 0:
        return 1.0
    if lam <= 0:
        return 0.0
    term, below = math.exp(-lam), 0.0
    for i in range(k):
        below += term
        term *= lam / (i + 1)
    return max(0.0, 1.0 - below)


def _nanmedian(values: Sequence[float]) -> float:
    arr = np.asarray(values, np.float64)
    return float(np.nanmedian(arr)) if np.isfinite(arr).any() else float("nan")


def _finite_or_none(x: float) -> float | None:  # as results.json writes a figure
    return float(x) if math.isfinite(x) else None
