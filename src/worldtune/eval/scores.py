"""The statistics of an evaluation's scores: per model, per input and per camera view; each model's paired
difference to its base model and, driven by another episode's actions, to itself (its action sensitivity); the
floor of the dynamic cross-view figure.

A module of its own so that what reads results.json (the console summary, worldtune.eval.summary; the report,
worldtune.eval.report) shares the labels and directions these figures are made with (the real clips' label, the
base model's, the metrics where lower is better) without importing the scoring stage, worldtune.eval.evaluate.
The bootstrap behind every interval is worldtune.eval.stats.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from worldtune.eval.end_effector import METRIC as EE_METRIC
from worldtune.eval.sampson import KINDS

REFERENCE = "real"  # model label of the ground-truth clips
SAMPSON_METRICS = tuple(f"sampson_{k}" for k in KINDS)
PIXEL_METRICS = ("psnr", "ssim", "dynamic_psnr", "motion_iou_spatial", "motion_iou_spatiotemporal", "warp_error")
LOWER_IS_BETTER = set(SAMPSON_METRICS) | {"warp_error", EE_METRIC}
BASE = "base"  # model label of the un-adapted model, what every other model is compared with
DYNAMIC = "sampson_crossview_dynamic"
# what the dynamic figure can and cannot resolve: written beside its values in results.json, the console and the report
DYNAMIC_SCOPE = ("sampson_crossview_dynamic reads where the outermost points of what moves sit against the rig's "
                 "epipolar geometry, per fixed pair, and only across the epipolar lines: a misplacement along them reads "
                 "as right. Its floor on this footage is the real clips' own value, shown beside every value: a value "
                 "near the floor says nothing about the model, only a rise above it reads a misplaced arm. Where an "
                 "object rests in one place for part of the clip (a block before it is picked up, or its empty place "
                 "after), that still spot counts as moving and can be the outermost point on every frame: the figure "
                 "then reads that spot, not the arm, and another episode of the same task may read as low as the truth "
                 "(on rendered footage, a 30° pair: 0.16-0.68 px for another episode, 0.04-0.62 px for the truth; other "
                 "pairs 6-26 px). Where the real clips themselves read several pixels, a misplacement of a few pixels "
                 "is not resolved")


def is_reference(label: str) -> bool:
    return label == REFERENCE or label.startswith(REFERENCE + ":")


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def stats(values: Sequence[float | None]) -> dict[str, Any]:
    """mean, std (population), median and n of the values that exist; missing ones counted."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
    base = {"n": int(len(arr)), "missing": int(len(values) - len(arr))}
    if not len(arr):
        return {**base, "mean": None, "std": None, "median": None}
    return {**base, "mean": float(arr.mean()), "std": float(arr.std()), "median": float(np.median(arr))}


def base_label(label: str) -> str:
    """The base model a model is compared with: "base", or "<folder>/base" for qualified labels."""
    return f"{label.rsplit('/', 1)[0]}/{BASE}" if "/" in label else BASE


def versus_base(rows: Sequence[dict[str, Any]], label: str, metric: str) -> dict[str, Any]:
    """Paired difference of a model to its base over the same (input, seed) pairs, CI over inputs."""
    from worldtune.eval.stats import paired_difference

    def scores(lab: str) -> dict[tuple[str, Any], float]:
        return {(r["name"], r["seed"]): r[metric] for r in rows if r["model"] == lab and r.get(metric) is not None}

    base = base_label(label)
    has_base = any(r["model"] == base for r in rows)
    d = paired_difference(scores(label), scores(base) if has_base else None, higher_is_better=metric not in LOWER_IS_BETTER)
    return {"base": base, **d.to_dict()}


def action_sensitivity(rows: Sequence[dict[str, Any]], label: str, metric: str, view: str | None = None) -> dict[str, Any]:
    """Paired difference of a model under its clips' own actions to the same model under another episode's
    actions (same clip, first frame and seed; worldtune.eval.dynamics), CI over clips. For PSNR-like metrics a
    model that uses its actions reads > 0; one that ignores them reads 0."""
    from worldtune.eval.dynamics import OTHER_SUFFIX
    from worldtune.eval.stats import paired_difference

    def scores(lab: str) -> dict[tuple[str, Any], float]:
        out = {}
        for r in rows:
            v = r.get(metric) if view is None else ((r.get("pixel_views") or {}).get(view) or {}).get(metric)
            if r["model"] == lab and v is not None:
                out[(r["name"], r["seed"])] = v
        return out

    d = paired_difference(scores(label), scores(label + OTHER_SUFFIX), higher_is_better=metric not in LOWER_IS_BETTER)
    return {"other": label + OTHER_SUFFIX, **d.to_dict()}


def per_view(rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per camera view (of a multi-camera layout): statistics of each pixel metric over the videos."""
    roles = sorted({role for r in rows for role in (r.get("pixel_views") or {})})
    if len(roles) < 2:
        return {}
    wanted = [m for m in metrics if m in PIXEL_METRICS]
    return {role: {m: stats([((r.get("pixel_views") or {}).get(role) or {}).get(m) for r in rows]) for m in wanted}
            for role in roles}


def aggregate(rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per model (over all its videos) and per model and input (over seeds) statistics of each metric (and per
    camera view for the pixel metrics), for every model but the base and the real clips its paired difference to
    the base, and for a model also driven by other episodes' actions its action sensitivity."""
    from worldtune.eval.dynamics import OTHER_SUFFIX, is_other
    from worldtune.eval.stats import best_models

    models: dict[str, Any] = {}
    inputs: dict[str, dict[str, Any]] = {}
    labels = {r["model"] for r in rows}
    described = {r["model"]: r.get("description") for r in rows if r.get("baseline")}  # baselines, in their words
    for label in sorted(labels, key=lambda m: (is_reference(m), m in described, is_other(m), m != BASE, m)):
        mine = [r for r in rows if r["model"] == label]
        names = sorted({r["name"] for r in mine})
        models[label] = {"reference": is_reference(label), "baseline": label in described, "videos": len(mine),
                         "inputs": len(names), **{m: stats([r.get(m) for r in mine]) for m in metrics}}
        if label in described:
            models[label]["description"] = described[label]
        views = per_view(mine, metrics)
        if views:
            models[label]["views"] = views
        if not is_reference(label) and not is_other(label) and label.rsplit("/", 1)[-1] != BASE:
            models[label]["vs_base"] = {m: versus_base(rows, label, m) for m in metrics}
        if label + OTHER_SUFFIX in labels:
            models[label]["action_sensitivity"] = {m: action_sensitivity(rows, label, m) for m in metrics}
            if views:
                models[label]["action_sensitivity_views"] = {
                    role: {m: action_sensitivity(rows, label, m, role) for m in views[role]} for role in views}
        inputs[label] = {n: {m: stats([r.get(m) for r in mine if r["name"] == n]) for m in metrics} for n in names}
    for m in metrics:  # the best generated model per metric, for highlighting
        means = {k: v[m]["mean"] for k, v in models.items() if not v["reference"] and not v["baseline"]}
        for k in best_models(means, higher_is_better=m not in LOWER_IS_BETTER):
            models[k].setdefault("best", []).append(m)
    if DYNAMIC in metrics:
        add_dynamic_floor(models)
    return models, inputs


def dynamic_floor(models: dict[str, Any]) -> float | None:
    """The dynamic figure's floor on this footage: the real clips' own mean (the first real set's), None without one."""
    means = [s[DYNAMIC]["mean"] for label, s in models.items() if is_reference(label) and s.get(DYNAMIC)
             and s[DYNAMIC].get("mean") is not None]
    return means[0] if means else None


def add_dynamic_floor(models: dict[str, Any]) -> None:
    """Beside every generated model's value of the dynamic figure, its floor (`floor_px`) and what it can resolve
    (`scope`): a value within the floor, or one measured along the epipolar lines, says nothing about the model."""
    floor = dynamic_floor(models)
    for label, s in models.items():
        if not is_reference(label) and s.get(DYNAMIC) is not None:
            s[DYNAMIC] = {**s[DYNAMIC], "floor_px": floor, "scope": DYNAMIC_SCOPE}


def floor_suffix(models: dict[str, Any], metric: str, label: str) -> str:
    """' (floor 2.61 px)' beside a generated model's value of the dynamic figure (empty for other metrics and the
    real clips; 'floor unknown' without a real clip value)."""
    if metric != DYNAMIC or is_reference(label):
        return ""
    floor = (models.get(label, {}).get(metric) or {}).get("floor_px", dynamic_floor(models))
    return f" (floor {floor:.2f} px)" if floor is not None else " (floor unknown: no real clip value)"
