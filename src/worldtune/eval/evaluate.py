"""`worldtune evaluate`: score generation folders with Sampson geometry and a VLM judge.

Input: one or more generation folders (`info.json` + `generations.jsonl`, written by
`worldtune generate`; format in worldtune.infer.records). Every row is one video of one model
(label "base" or an adapter name) for one input and seed. The real clips (`ground_truth`) are
scored too, once per input, as the reference row "real" (one per folder, "real:<folder>", when
several folders with real clips are evaluated together, e.g. a grid and a separate-views run).

Output in `<out>/`:
- `results.json`: the config, per model and per input (over seeds) mean, std and n of every
  metric, skip counts, and the judge's status (`skipped` with the reason when no endpoint);
- `videos.jsonl` / `videos.csv`: one row per scored video (the report reads these);
- `judge_cache.jsonl`: the judge's replies, so a rerun asks only what is new.

Metrics (names as in `evaluate.metrics`): `sampson_temporal`, `sampson_crossview`,
`sampson_crossview_dynamic` (pixels, lower is better; a video's value is its median over frame pairs;
scored against the real rig's geometry when it exists, worldtune.eval.sampson; the dynamic one on what
moves, worldtune.eval.silhouettes), the pixel metrics against the real continuation
(`pixels` = `psnr`, `ssim`, `dynamic_psnr`, `motion_iou_spatial`, `motion_iou_spatiotemporal`,
`warp_error`; worldtune.eval.pixels; a video's value is the mean over its camera views),
`judge_physics`, `judge_instruction` (1-5, higher is better), `judge:<rubric name or YAML path>`, and for datasets of
worldtune's synthetic scene `ee_track_error` (px, lower is better: the gripper found in each exterior view against its
true, recorded path; worldtune.eval.end_effector; absent, with the reason, for other datasets).
Every model is compared with the base model over the same (input, seed) pairs: paired mean
difference, a 95 % bootstrap CI over inputs and a win rate (worldtune.eval.stats).

Baselines (rows with `baseline` true, worldtune.infer.baselines: the first frame held, the real clip through the
VAE) are scored and compared like models; they are marked `baseline` in results.json, listed after the models and
never counted as the best model of a metric. Rows that name the same file for the same input (a baseline's rows
of every seed) are scored once.

`evaluate.mode = "actions"` first writes the folder to score: a Cosmos 3 forward-dynamics model (base and
adapters) driven by each held-out clip's real actions, and by another episode's actions
(worldtune.eval.dynamics). Pixel metrics are then also kept per camera view, and every model driven both ways
gets its *action sensitivity*: the paired difference own - other actions, CI over clips.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from worldtune.errors import EvaluationError
from worldtune.eval.end_effector import METRIC as EE_METRIC
from worldtune.eval.sampson import KINDS
from worldtune.eval.scores import (BASE, LOWER_IS_BETTER, PIXEL_METRICS, REFERENCE, SAMPSON_METRICS, _finite,
                                   aggregate, base_label, is_reference, stats)
from worldtune.eval.summary import print_summary
from worldtune.names import inside

FORMAT = "worldtune.eval"
VERSION = 1
JUDGE_METRICS = {"judge_physics": "physical_plausibility", "judge_instruction": "instruction_following"}


# -------------------------------------------------------------------------------------- inputs
@dataclass
class Entry:
    """One video to score: who made it, for which input and seed, and where its frames are."""

    model: str
    name: str
    seed: int | None
    run: str
    video: Path
    views: dict[str, Path] = field(default_factory=dict)
    layout: dict[str, Any] | None = None
    instruction: str | None = None
    prompt: str | None = None
    baseline: bool = False  # a baseline of the generation folder (worldtune.infer.baselines), not a model's video
    description: str | None = None  # a baseline's words for a report

    @property
    def key(self) -> str:
        return f"{self.model}/{self.name}/s{self.seed}" if self.seed is not None else f"{self.model}/{self.name}"

    @property
    def reference(self) -> bool:
        return is_reference(self.model)


def read_generation_folder(folder: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """info.json and the rows of a generations folder; torn lines (a killed run) are dropped."""
    root = Path(folder)
    info_path = root / "info.json"
    if not info_path.is_file():
        raise EvaluationError(f"{info_path} not found: evaluate.runs must name folders written by `worldtune generate`")
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise EvaluationError(f"{info_path}: not valid JSON ({e.msg}); regenerate the folder") from None
    if info.get("format") != "worldtune.generations":
        raise EvaluationError(f"{info_path}: format is {info.get('format')!r}, expected 'worldtune.generations'")
    if info.get("version") != 1:
        raise EvaluationError(f"{info_path}: version {info.get('version')} is not supported (this worldtune reads 1)")
    files = [root / "generations.jsonl"] if (root / "generations.jsonl").is_file() else sorted(root.glob("generations.rank*.jsonl"))
    if not files:
        raise EvaluationError(f"{root}/generations.jsonl not found: the generation run wrote no videos yet")
    rows: dict[tuple, dict[str, Any]] = {}
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                rows[(str(row["model"]), str(row["name"]), row.get("seed"))] = row
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return info, list(rows.values())


def collect_entries(runs: Sequence[str | Path], max_videos: int | None = None) -> tuple[list[Entry], list[dict[str, Any]]]:
    """Entries of all folders (generated videos, then one reference per real clip) and a run summary.

    A model label found in more than one folder is qualified as "<folder>/<label>" so that two
    runs' "base" rows are never averaged together by accident.
    """
    loaded = [(Path(r), *read_generation_folder(r)) for r in runs]
    label_runs: dict[str, set[str]] = {}
    for root, _, rows in loaded:
        for row in rows:
            label_runs.setdefault(str(row["model"]), set()).add(str(root))
    entries: list[Entry] = []
    refs: dict[str, Entry] = {}
    summary = []
    with_truth = [root for root, _, rows in loaded if any(r.get("ground_truth") for r in rows)]
    for root, info, rows in loaded:
        ref_label = REFERENCE if len(with_truth) <= 1 else f"{REFERENCE}:{root.name}"
        rows = sorted(rows, key=lambda r: (str(r["model"]), str(r["name"]), r.get("seed") or 0))[:max_videos]
        layout = info.get("layout")
        where = f"{root / 'generations.jsonl'}"
        for row in rows:
            label = str(row["model"])
            if len(label_runs[label]) > 1:
                label = f"{root.name}/{label}"
            entries.append(Entry(model=label, name=str(row["name"]), seed=row.get("seed"), run=str(root),
                                 video=inside(root, row["video"], f"{where} video"),
                                 views={k: inside(root, v, f"{where} views") for k, v in (row.get("views") or {}).items()},
                                 layout=layout, instruction=row.get("instruction"), prompt=row.get("prompt"),
                                 baseline=bool(row.get("baseline")), description=row.get("description")))
            gt = row.get("ground_truth")
            if gt and str((root / gt).resolve()) not in refs:
                refs[str((root / gt).resolve())] = Entry(
                    model=ref_label, name=str(row["name"]), seed=None, run=str(root),
                    video=inside(root, gt, f"{where} ground_truth"),
                    views={k: inside(root, v, f"{where} ground_truth_views")
                           for k, v in (row.get("ground_truth_views") or {}).items()},
                    layout=layout, instruction=row.get("instruction"), prompt=row.get("prompt"))
        summary.append({"path": str(root), "videos": len(rows), "fps": info.get("fps"), "layout": layout,
                        "dataset": info.get("dataset"),
                        "models": sorted({str(r["model"]) for r in rows})})
    return entries + list(refs.values()), summary


def shared_files(entries: Sequence[Entry]) -> tuple[list[Entry], dict[str, str]]:
    """The entries to score (one per distinct file of an input) and, for every entry key, the key of the entry
    scored for it: rows that name one file (a baseline's rows of every seed) get one score, computed once."""
    first: dict[tuple, str] = {}
    scored, same = [], {}
    for e in entries:
        k = (e.run, e.name, e.reference, str(e.video), tuple(sorted((r, str(v)) for r, v in e.views.items())))
        if k not in first:
            first[k] = e.key
            scored.append(e)
        same[e.key] = first[k]
    return scored, same


# ------------------------------------------------------------------------------------- metrics
def check_metrics(names: Sequence[str]) -> list[str]:
    """The metric list with `pixels` expanded; unknown names are a one-line error."""
    known = set(SAMPSON_METRICS) | set(PIXEL_METRICS) | set(JUDGE_METRICS) | {"pixels", EE_METRIC}
    bad = [m for m in names if m not in known and not m.startswith("judge:")]
    if bad:
        raise EvaluationError(f"unknown metric(s) {bad} in evaluate.metrics: use {sorted(known)} or judge:<rubric>")
    expanded = [x for m in names for x in (PIXEL_METRICS if m == "pixels" else (m,))]
    return list(dict.fromkeys(expanded))


def rubric_for(metric: str) -> str:
    return JUDGE_METRICS.get(metric) or metric.split(":", 1)[1]


def sampson_config(cfg: Any, metrics: Sequence[str]) -> Any:
    from worldtune.eval.sampson import SampsonConfig

    return SampsonConfig(geometry=cfg.sampson_geometry, max_features=cfg.sampson_max_features,
                         min_inliers=cfg.min_inliers, min_motion=cfg.sampson_min_motion, frame_gap=cfg.frame_gap,
                         frame_step=cfg.sampson_frame_step, crossview_step=cfg.sampson_crossview_step, moving_views=tuple(cfg.sampson_moving_views),
                         masks=tuple((r, tuple(tuple(b) for b in bs)) for r, bs in cfg.sampson_masks.items()),
                         auto_masks=cfg.sampson_auto_masks, gate=cfg.sampson_gate,
                         detect_scale=cfg.sampson_detect_scale,
                         temporal="sampson_temporal" in metrics, crossview="sampson_crossview" in metrics,
                         crossview_dynamic="sampson_crossview_dynamic" in metrics)


def _source(e: Entry) -> Any:
    from worldtune.eval.sampson import VideoSource

    return VideoSource(key=e.key, video=str(e.video), layout=e.layout, views={k: str(v) for k, v in e.views.items()} or None)


def find_dataset(cfg: Any, runs: Sequence[dict[str, Any]]) -> Path | None:
    """The prepared dataset behind the generations: evaluate.dataset, else the generations' info.json."""
    if cfg.dataset:
        return Path(cfg.dataset)
    for r in runs:
        d = r.get("dataset")
        if d and (Path(d) / "info.json").is_file():
            return Path(d)
    return None


def rig_references(entries: Sequence[Entry], cfg: Any, scfg: Any, dataset: Path | None) -> tuple[dict[tuple[str, str], Any], dict[str, Any]]:
    """The real rig's reference per (run, input): calibrated cameras when the dataset has them,
    completed from the real clip (masks, and F of fixed pairs the calibration lacks)."""
    from worldtune.eval.rig import Calibration, calibrated_reference
    from worldtune.eval.sampson import SampsonError

    cal = Calibration.load(dataset) if dataset is not None and scfg.geometry in ("auto", "calibrated") else None
    reals = [e for e in entries if e.reference]
    bases = []
    for e in reals:
        roles = sorted((e.layout or {}).get("cells", {})) or sorted(e.views)
        bases.append(calibrated_reference(cal, e.name, roles) if cal is not None and roles else None)
    refs = SampsonError(scfg).reference_many([_source(e) for e in reals], bases, workers=cfg.workers)
    out = {(e.run, e.name): r for e, r in zip(reals, refs) if r is not None}
    summary = {"dataset": str(dataset) if dataset else None, "calibration": cal is not None,
               "inputs": {f"{Path(e.run).name}/{e.name}": r.summary() for e, r in zip(reals, refs) if r is not None}}
    return out, summary


def run_sampson(entries: Sequence[Entry], cfg: Any, metrics: Sequence[str],
                dataset: Path | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per entry key: the video's temporal / cross-view median, mean, mode, pair and skip counts;
    plus a summary of the rig references used."""
    from worldtune.eval.sampson import SampsonError

    scfg = sampson_config(cfg, metrics)
    refs, ref_summary = rig_references(entries, cfg, scfg, dataset)
    scores = SampsonError(scfg).score_many([_source(e) for e in entries], workers=cfg.workers,
                                           references=[refs.get((e.run, e.name)) for e in entries])
    out: dict[str, dict[str, Any]] = {}
    for e, s in zip(entries, scores):
        row: dict[str, Any] = {"sampson_status": s.status, "sampson_detect_scale": s.detect_scale}
        for kind in KINDS:
            if f"sampson_{kind}" not in metrics:
                continue
            parts = getattr(s, kind)
            merged = s.overall(kind) if s.ok and parts else None
            row[f"sampson_{kind}"] = _finite(merged.median) if merged else None
            row[f"sampson_{kind}_mean"] = _finite(merged.mean) if merged else None
            row[f"sampson_{kind}_mode"] = merged.mode if merged else None
            row[f"sampson_{kind}_pairs"] = merged.evaluated if merged else 0
            row[f"sampson_{kind}_skipped"] = merged.n_skipped if merged else 0
            row[f"sampson_{kind}_skip_reasons"] = dict(merged.skipped) if merged else {}
        row["sampson_detail"] = s.to_dict()
        out[e.key] = row
    return out, ref_summary


def run_pixels(entries: Sequence[Entry], cfg: Any, metrics: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per entry key: pixel metrics of each generated video against its real clip (mean over views)."""
    wanted = [m for m in metrics if m in PIXEL_METRICS]
    truth = {(e.run, e.name): e for e in entries if e.reference}
    jobs = [(e.key, _source(e), _source(truth[(e.run, e.name)]), cfg.pixel_start, wanted)
            for e in entries if not e.reference and (e.run, e.name) in truth]
    out: dict[str, dict[str, Any]] = {}
    from worldtune.eval.progress import map_processes

    for key, row in map_processes(_pixels_one, jobs, cfg.workers, "pixel metrics"):
        out[key] = row
    for e in entries:  # every generated video without a real clip says why its cells are empty
        if not e.reference and e.key not in out:
            out[e.key] = {"pixel_status": "no ground truth: generate from a prepared dataset to get pixel metrics"}
    return out


def _pixels_one(key: str, gen: Any, real: Any, start: int, wanted: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """Pixel metrics of one generated video: per view, then the mean over views."""
    from worldtune.eval.pixels import pixel_metrics
    from worldtune.eval.video import VideoReadError
    from worldtune.errors import WorldtuneError

    try:
        g, r = gen.load(), real.load()
        per = {}
        for role in sorted(set(g) & set(r)):
            n = min(len(g[role]), len(r[role]))
            gv, rv = g[role][:n], r[role][:n]
            if gv.shape != rv.shape:  # a generation at another size: compare at the real clip's
                import cv2
                gv = np.stack([cv2.resize(f, (rv.shape[2], rv.shape[1]), interpolation=cv2.INTER_AREA) for f in gv])
            per[role] = pixel_metrics(gv, rv, start=min(start, max(n - 1, 0)), label=f"{key} / {role}").to_dict()
    except (VideoReadError, WorldtuneError) as e:
        return key, {"pixel_status": f"skipped: {e}"}
    row: dict[str, Any] = {"pixel_status": "ok", "pixel_detail": per,
                           "pixel_views": {role: {m: v["values"].get(m) for m in wanted} for role, v in per.items()}}
    for m in list(wanted) + (["warp_error_real"] if "warp_error" in wanted else []):
        vals = [v["values"].get(m) for v in per.values() if v["values"].get(m) is not None]
        row[m] = float(np.mean(vals)) if vals else None
        if not vals:
            row[f"{m}_reason"] = next((v["reasons"].get(m) for v in per.values() if v["reasons"].get(m)), "no view")
    curves = {}
    for m in wanted:
        cs = [v["curves"][m] for v in per.values() if m in v["curves"]]
        if cs:
            L = min(len(c) for c in cs)
            curves[m] = [_mean_or_none([c[i] for c in cs]) for i in range(L)]
    row["pixel_curves"] = curves
    return key, row


def run_end_effector(entries: Sequence[Entry], cfg: Any, dataset: Path | None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per entry key: the end-effector track figures (worldtune.eval.end_effector) of every video of an input with
    a real clip, and the status: "ok", or "absent" with the reason (a dataset that does not record the truth)."""
    from worldtune.eval.end_effector import TrackTruth, score_input
    from worldtune.eval.progress import map_processes

    truth = TrackTruth.load(dataset)
    if isinstance(truth, str):
        return {}, {"status": "absent", "reason": truth}
    reals = {(e.run, e.name): e for e in entries if e.reference}
    jobs, unknown = [], []
    for (run, name), real in reals.items():
        truths = truth.views(name)
        if not truths:
            unknown.append(name)
            continue
        others = [(e.key, _source(e)) for e in entries if not e.reference and (e.run, e.name) == (run, name)]
        jobs.append(((real.key, _source(real)), others, truths))
    out: dict[str, dict[str, Any]] = {}
    for part in map_processes(score_input, jobs, cfg.workers, "end-effector tracks"):
        out.update(part)
    why = "no true gripper path for this input (not a clip of the evaluated dataset, or no fixed camera)"
    for e in entries:
        if e.key not in out:
            out[e.key] = {f"{EE_METRIC}_reason": why if (e.run, e.name) in reals else "no real clip for this input"}
    status = {"status": "ok", "dataset": str(dataset), "inputs": len(jobs)}
    if unknown:
        status["inputs_without_truth"] = sorted(unknown)
    return out, status


def run_task_success(entries: Sequence[Entry], cfg: Any, dataset: Path | None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per entry key: whether the video does the task (worldtune.eval.task_success), judged per input against where
    the real clip puts the block; and the status: "ok", or "absent" with the reason (not a synthetic-scene dataset)."""
    from worldtune.eval.progress import map_processes
    from worldtune.eval.task_success import METRIC, TaskTruth, judge_input

    truth = TaskTruth.load(dataset)
    if isinstance(truth, str):
        return {}, {"status": "absent", "reason": truth}
    reals = {(e.run, e.name): e for e in entries if e.reference}
    jobs, unknown = [], []
    for (run, name), real in reals.items():
        clip = truth.clip(name)
        if clip is None:
            unknown.append(name)
            continue
        others = [(e.key, _source(e)) for e in entries if not e.reference and (e.run, e.name) == (run, name)]
        jobs.append(((real.key, _source(real)), others, clip))
    out: dict[str, dict[str, Any]] = {}
    for part in map_processes(judge_input, jobs, cfg.workers, "task success"):
        out.update(part)
    for e in entries:
        if e.key not in out:
            out[e.key] = {METRIC: None, "task_reason": "no scene truth for this input (not a clip of the evaluated "
                          "dataset)" if (e.run, e.name) in reals else "no real clip for this input"}
    status: dict[str, Any] = {"status": "ok", "dataset": str(dataset), "inputs": len(jobs)}
    if unknown:
        status["inputs_without_truth"] = sorted(unknown)
    return out, status


def task_summary(rows: Sequence[dict[str, Any]], status: dict[str, Any]) -> dict[str, Any]:
    from worldtune.eval.task_success import summary

    return summary(rows, status)


def input_vs_seed(rows: Sequence[dict[str, Any]], entries: Sequence[Entry]) -> dict[str, Any]:
    """results.json's `input_vs_seed` (worldtune.eval.seed_spread): per model, how much more its videos differ across
    inputs than across noise seeds."""
    from worldtune.eval.seed_spread import summary

    by_key = {(e.model, e.name, e.seed): e for e in entries}
    return summary(rows, lambda r: _source(by_key[(r["model"], r["name"], r["seed"])]).load())


def end_effector_summary(rows: Sequence[dict[str, Any]], status: dict[str, Any]) -> dict[str, Any]:
    """results.json's `end_effector`: the status and, per model, each exterior view's statistics and paired
    difference to the base model, and the share of scored frames where the gripper was found."""
    from worldtune.eval.stats import paired_difference

    if status.get("status") != "ok":
        return status
    models: dict[str, Any] = {}
    for label in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == label]
        roles = sorted({role for r in mine for role in (r.get("ee_track_views") or {})})
        found = [r["ee_track_found"] for r in mine if r.get("ee_track_found") is not None]
        m: dict[str, Any] = {"found": float(np.mean(found)) if found else None,
                             "views": {role: stats([(r.get("ee_track_views") or {}).get(role) for r in mine]) for role in roles}}
        base = base_label(label)
        if not is_reference(label) and label.rsplit("/", 1)[-1] != BASE and any(r["model"] == base for r in rows):
            def per(lab: str, role: str) -> dict[tuple[str, Any], float]:
                return {(r["name"], r["seed"]): v for r in rows if r["model"] == lab
                        and (v := (r.get("ee_track_views") or {}).get(role)) is not None}
            m["views_vs_base"] = {role: paired_difference(per(label, role), per(base, role),
                                                           higher_is_better=False).to_dict() for role in roles}
        models[label] = m
    return {**status, "metric": EE_METRIC, "unit": "px", "models": models}


def _mean_or_none(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def run_judge(entries: Sequence[Entry], cfg: Any, metrics: Sequence[str], out: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per entry key: score, answer and status of each judge metric; plus the judge's status."""
    from worldtune.eval.judge import Judge, JudgeItem

    judge_metrics = [m for m in metrics if m.startswith("judge")]
    status: dict[str, Any] = {"metrics": judge_metrics, "endpoint": cfg.judge_endpoint, "model": cfg.judge_model}
    if not judge_metrics:
        return {}, {**status, "status": "not requested"}
    if not cfg.judge_endpoint:
        return {}, {**status, "status": "skipped",
                    "reason": "no judge endpoint configured (set evaluate.judge_endpoint, see docs/eval.md)"}
    rubrics = {m: rubric_for(m) for m in judge_metrics}
    api_key = os.environ.get(cfg.judge_api_key_env) if cfg.judge_api_key_env else None
    judge = Judge(endpoint=cfg.judge_endpoint, model=cfg.judge_model, rubrics=list(rubrics.values()),
                  fps=cfg.judge_fps, input=cfg.judge_input, max_images=cfg.judge_max_images,
                  concurrency=cfg.judge_concurrency, timeout=cfg.judge_timeout, retries=cfg.judge_retries,
                  max_tokens=cfg.judge_max_tokens, cache_path=out / "judge_cache.jsonl", api_key=api_key,
                  extra_body=dict(cfg.judge_extra_body))
    by_rubric = {r.name: m for m, r in zip(rubrics, judge.rubric_list)}
    items = [JudgeItem(e.key, str(e.video), e.instruction) for e in entries]
    results = judge.judge_many(items)
    per: dict[str, dict[str, Any]] = {}
    counts = {m: {"ok": 0, "cached": 0, "parse_failed": 0, "error": 0, "skipped": 0} for m in judge_metrics}
    errors: list[str] = []
    for r in results:
        m = by_rubric[r.rubric]
        counts[m][r.status] += 1
        if r.error and len(errors) < 5:
            errors.append(f"{r.id} {r.rubric}: {r.error}")
        per.setdefault(r.id, {}).update({m: r.score, f"{m}_text": r.text, f"{m}_explanation": r.explanation or None,
                                         f"{m}_status": r.status})
    return per, {**status, "status": "ran", "rubrics": rubrics, "counts": counts, "first_errors": errors,
                 "cache": str(out / "judge_cache.jsonl"), "input": cfg.judge_input, "fps": cfg.judge_fps}


# ---------------------------------------------------------------------------------------- output
def write_rows(out: Path, rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> None:
    """videos.jsonl (everything) and videos.csv (the flat columns a spreadsheet wants), atomically."""
    import io

    from worldtune.atomic import atomic_write_bytes

    atomic_write_bytes(out / "videos.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    cols = ["model", "name", "seed", "video", "status", *metrics,
            *[f"{m}_{s}" for m in metrics if m.startswith("sampson") for s in ("mode", "mean", "pairs", "skipped")],
            *(["sampson_detect_scale"] if "sampson_crossview" in metrics else [])]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
    atomic_write_bytes(out / "videos.csv", buf.getvalue().encode())


# ---------------------------------------------------------------------------------------- stage
def run(cfg: Any) -> dict[str, Any]:
    """Score every video of the configured generation folders; write and return results.json's content.

    `cfg` is the [evaluate] section or the whole config; `evaluate.mode = "actions"` needs the whole config (its
    [model]): the folder scored is then the one worldtune.eval.dynamics generates under the dataset's actions.
    Sampson and pixel results are written before the judge is asked, so a judge that fails
    cannot lose them; a judge whose every request failed makes the command fail after writing.
    """
    t0 = time.time()
    whole, cfg = cfg, getattr(cfg, "evaluate", cfg)
    metrics = check_metrics(cfg.metrics)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    folders = list(cfg.runs)
    if cfg.mode == "actions":
        if not hasattr(whole, "model"):
            raise EvaluationError("evaluate.mode = \"actions\" generates with the model of [model]: pass the whole "
                                  "config (`worldtune evaluate CONFIG`)")
        from worldtune.eval.dynamics import generate_under_actions

        folders = [str(generate_under_actions(whole))]
    closed = _closed_loop(whole, Path(folders[0])) if cfg.mode == "actions" and cfg.actions.labellers else None
    entries, runs = collect_entries(folders, cfg.max_videos)
    if not entries:
        raise EvaluationError(f"no videos in {cfg.runs}: the generation folders' generations.jsonl are empty")
    sampson_metrics = [m for m in metrics if m in SAMPSON_METRICS]
    dataset = find_dataset(cfg, runs)
    scored, same = shared_files(entries)
    sampson, rig = run_sampson(scored, cfg, sampson_metrics, dataset) if sampson_metrics else ({}, {})
    pixels = run_pixels(scored, cfg, metrics) if any(m in PIXEL_METRICS for m in metrics) else {}
    ee, ee_status = run_end_effector(scored, cfg, dataset) if EE_METRIC in metrics else ({}, None)
    if ee_status and ee_status["status"] != "ok":  # not an error: this dataset does not record the truth
        metrics = [m for m in metrics if m != EE_METRIC]
    task, task_status = run_task_success(scored, cfg, dataset)
    real_warp = {(e.run, e.name): pixels[e.key].get("warp_error_real") for e in scored if e.key in pixels}
    rows = []
    for e in entries:
        row: dict[str, Any] = {"model": e.model, "name": e.name, "seed": e.seed, "run": e.run, "reference": e.reference,
                               "baseline": e.baseline, "video": str(e.video.resolve()),
                               "views": {k: str(v.resolve()) for k, v in e.views.items()},
                               "instruction": e.instruction, "prompt": e.prompt}
        if e.description:
            row["description"] = e.description
        row.update(sampson.get(same[e.key], {}))
        row.update(pixels.get(same[e.key], {}))
        row.update(ee.get(same[e.key], {}))
        row.update(task.get(same[e.key], {}))
        if e.reference and "warp_error" in metrics:
            row["warp_error"] = real_warp.get((e.run, e.name))
        row["status"] = row.get("sampson_status", "ok")
        rows.append(row)

    spread = input_vs_seed(rows, entries)

    def finish(judge_status: dict[str, Any], judged: dict[str, dict[str, Any]]) -> dict[str, Any]:
        for r, e in zip(rows, entries):
            r.update(judged.get(same[e.key], {}))
        models, inputs = aggregate(rows, metrics)
        results: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "out": str(out), "config": cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else dict(vars(cfg)),
            "runs": runs, "metrics": metrics, "lower_is_better": sorted(set(metrics) & LOWER_IS_BETTER),
            "models": models, "inputs": inputs, "judge": judge_status, "rig": rig,
            "sampson": _sampson_summary(entries, {e.key: sampson[same[e.key]] for e in entries
                                                  if same[e.key] in sampson}, sampson_metrics),
            "files": {"videos": "videos.jsonl", "csv": "videos.csv"}, "seconds": round(time.time() - t0, 2),
            **({"closed_loop": closed} if closed else {}),
            **({"end_effector": end_effector_summary(rows, ee_status)} if ee_status else {}),
            "task_success": task_summary(rows, task_status), "input_vs_seed": spread,
        }
        write_rows(out, rows, metrics)
        _write_json(out / "results.json", results)
        return results

    finish({"status": "pending"}, {})
    try:
        judged, judge_status = run_judge(scored, cfg, metrics, out)
    except Exception as e:  # noqa: BLE001 - a broken judge must not lose the scores above
        judged, judge_status = {}, {"status": "failed", "reason": f"{type(e).__name__}: {e}"}
    results = finish(judge_status, judged)
    print_summary(results)
    if closed:
        from worldtune.eval.closed_loop import print_tables

        print_tables(closed)
    counts = judge_status.get("counts") or {}
    if judge_status.get("status") == "failed" or (counts and all(
            c["ok"] + c["cached"] + c["parse_failed"] == 0 and c["error"] > 0 for c in counts.values())):
        first = (judge_status.get("first_errors") or [judge_status.get("reason")])[0]
        raise EvaluationError(f"every judge request failed (first: {first}); the other metrics are in "
                              f"{out / 'results.json'}; check evaluate.judge_endpoint")
    return results


def _closed_loop(whole: Any, generations: Path) -> dict[str, Any]:
    """The actions-mode videos labelled back by evaluate.actions.labellers (worldtune.eval.closed_loop)."""
    from worldtune.console import plain
    from worldtune.eval import closed_loop as cl

    ac = whole.evaluate.actions
    dataset = Path(ac.dataset)
    labellers = {}
    for kind in ac.labellers:
        plain(f"closed-loop action consistency: labelling {generations} with the {kind} labeller")
        if kind == "idm":
            if not ac.idm:
                raise EvaluationError("evaluate.actions.labellers has idm: set evaluate.actions.idm to a `worldtune "
                                      "idm` run folder")
            labellers[kind] = cl.idm_labeller(ac.idm, ac.device)
        else:
            fps = float(json.loads((dataset / "info.json").read_text())["fps"])
            labellers[kind] = cl.cosmos3_labeller(whole, dataset, fps)
    return cl.run(generations, dataset, labellers)


def _write_json(path: Path, obj: Any) -> None:
    from worldtune.atomic import atomic_write_json

    atomic_write_json(path, obj, indent=1)


def _sampson_summary(entries: Sequence[Entry], sampson: dict[str, dict[str, Any]], metrics: Sequence[str]) -> dict[str, Any]:
    """Per model: across-video statistics of video medians, pairs evaluated and skipped (by reason)."""
    from worldtune.eval.sampson import across_videos

    out: dict[str, Any] = {}
    for label in sorted({e.model for e in entries}):
        rows = [sampson[e.key] for e in entries if e.model == label and e.key in sampson]
        s: dict[str, Any] = {"videos": len(rows), "videos_skipped": sum(r["sampson_status"] != "ok" for r in rows)}
        for m in metrics:
            kind = m.split("_", 1)[1]
            reasons: dict[str, int] = {}
            for r in rows:
                for k, v in r.get(f"{m}_skip_reasons", {}).items():
                    reasons[k] = reasons.get(k, 0) + v
            s[kind] = {**across_videos([r.get(m) if r.get(m) is not None else float("nan") for r in rows if r["sampson_status"] == "ok"]),
                       "pairs": sum(r.get(f"{m}_pairs", 0) for r in rows), "pairs_skipped": sum(reasons.values()),
                       "skip_reasons": reasons}
        out[label] = s
    return out
