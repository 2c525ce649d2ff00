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

Metrics (names as in `evaluate.metrics`): `sampson_temporal`, `sampson_crossview` (pixels, lower
is better; a video's value is its median over frame pairs), `judge_physics`,
`judge_instruction` (1-5, higher is better), and `judge:<rubric name or YAML path>`.
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

FORMAT = "worldtune.eval"
VERSION = 1
REFERENCE = "real"  # model label of the ground-truth clips
SAMPSON_METRICS = ("sampson_temporal", "sampson_crossview")
JUDGE_METRICS = {"judge_physics": "physical_plausibility", "judge_instruction": "instruction_following"}
LOWER_IS_BETTER = set(SAMPSON_METRICS)


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

    @property
    def key(self) -> str:
        return f"{self.model}/{self.name}/s{self.seed}" if self.seed is not None else f"{self.model}/{self.name}"

    @property
    def reference(self) -> bool:
        return is_reference(self.model)


def is_reference(label: str) -> bool:
    return label == REFERENCE or label.startswith(REFERENCE + ":")


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
        for row in rows:
            label = str(row["model"])
            if len(label_runs[label]) > 1:
                label = f"{root.name}/{label}"
            entries.append(Entry(model=label, name=str(row["name"]), seed=row.get("seed"), run=str(root),
                                 video=root / row["video"], views={k: root / v for k, v in (row.get("views") or {}).items()},
                                 layout=layout, instruction=row.get("instruction"), prompt=row.get("prompt")))
            gt = row.get("ground_truth")
            if gt and str((root / gt).resolve()) not in refs:
                refs[str((root / gt).resolve())] = Entry(
                    model=ref_label, name=str(row["name"]), seed=None, run=str(root), video=root / gt,
                    views={k: root / v for k, v in (row.get("ground_truth_views") or {}).items()},
                    layout=layout, instruction=row.get("instruction"), prompt=row.get("prompt"))
        summary.append({"path": str(root), "videos": len(rows), "fps": info.get("fps"), "layout": layout,
                        "models": sorted({str(r["model"]) for r in rows})})
    return entries + list(refs.values()), summary


# ------------------------------------------------------------------------------------- metrics
def check_metrics(names: Sequence[str]) -> list[str]:
    known = set(SAMPSON_METRICS) | set(JUDGE_METRICS)
    bad = [m for m in names if m not in known and not m.startswith("judge:")]
    if bad:
        raise EvaluationError(f"unknown metric(s) {bad} in evaluate.metrics: use {sorted(known)} or judge:<rubric>")
    return list(dict.fromkeys(names))


def rubric_for(metric: str) -> str:
    return JUDGE_METRICS.get(metric) or metric.split(":", 1)[1]


def run_sampson(entries: Sequence[Entry], cfg: Any, metrics: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per entry key: the video's temporal / cross-view median, mean, pair and skip counts."""
    from worldtune.eval.sampson import SampsonConfig, SampsonError, VideoSource

    scfg = SampsonConfig(matcher=cfg.sampson_matcher, max_features=cfg.sampson_max_features,
                         min_inliers=cfg.min_inliers, min_motion=cfg.sampson_min_motion, frame_gap=cfg.frame_gap, frame_step=cfg.sampson_frame_step,
                         moving_views=tuple(cfg.sampson_moving_views),
                         temporal="sampson_temporal" in metrics, crossview="sampson_crossview" in metrics)
    sources = [VideoSource(key=e.key, video=str(e.video), layout=e.layout,
                           views={k: str(v) for k, v in e.views.items()} or None) for e in entries]
    scores = SampsonError(scfg).score_many(sources, workers=cfg.workers)
    out: dict[str, dict[str, Any]] = {}
    for e, s in zip(entries, scores):
        row: dict[str, Any] = {"sampson_status": s.status}
        for kind in ("temporal", "crossview"):
            if f"sampson_{kind}" not in metrics:
                continue
            parts = getattr(s, kind)
            merged = s.overall(kind) if s.ok and parts else None
            row[f"sampson_{kind}"] = _finite(merged.median) if merged else None
            row[f"sampson_{kind}_mean"] = _finite(merged.mean) if merged else None
            row[f"sampson_{kind}_pairs"] = merged.evaluated if merged else 0
            row[f"sampson_{kind}_skipped"] = merged.n_skipped if merged else 0
            row[f"sampson_{kind}_skip_reasons"] = dict(merged.skipped) if merged else {}
        row["sampson_detail"] = s.to_dict()
        out[e.key] = row
    return out


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


# --------------------------------------------------------------------------------- aggregation
def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def stats(values: Sequence[float | None]) -> dict[str, Any]:
    """mean, std (population), median and n of the values that exist; missing ones counted."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
    base = {"n": int(len(arr)), "missing": int(len(values) - len(arr))}
    if not len(arr):
        return {**base, "mean": None, "std": None, "median": None}
    return {**base, "mean": float(arr.mean()), "std": float(arr.std()), "median": float(np.median(arr))}


def aggregate(rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per model (over all its videos) and per model and input (over seeds) statistics of each metric."""
    models: dict[str, Any] = {}
    inputs: dict[str, dict[str, Any]] = {}
    for label in sorted({r["model"] for r in rows}, key=lambda m: (is_reference(m), m != "base", m)):
        mine = [r for r in rows if r["model"] == label]
        names = sorted({r["name"] for r in mine})
        models[label] = {"reference": is_reference(label), "videos": len(mine), "inputs": len(names),
                         **{m: stats([r.get(m) for r in mine]) for m in metrics}}
        inputs[label] = {n: {m: stats([r.get(m) for r in mine if r["name"] == n]) for m in metrics} for n in names}
    return models, inputs


# ---------------------------------------------------------------------------------------- output
def write_rows(out: Path, rows: Sequence[dict[str, Any]], metrics: Sequence[str]) -> None:
    """videos.jsonl (everything) and videos.csv (the flat columns a spreadsheet wants)."""
    with open(out / "videos.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    cols = ["model", "name", "seed", "video", "status", *metrics,
            *[f"{m}_{s}" for m in metrics if m.startswith("sampson") for s in ("mean", "pairs", "skipped")]]
    with open(out / "videos.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})


def print_summary(results: dict[str, Any]) -> None:
    """The models x metrics table (mean ± std, n), and what was skipped."""
    from rich.console import Console
    from rich.table import Table

    metrics = results["metrics"]
    table = Table(title=f"worldtune evaluate: {results['out']}")
    table.add_column("model")
    table.add_column("videos", justify="right")
    for m in metrics:
        arrow = "↓" if m in LOWER_IS_BETTER else "↑"
        table.add_column(f"{m} {arrow}", justify="right")
    for label, s in results["models"].items():
        cells = []
        for m in metrics:
            v = s[m]
            cells.append("—" if v["mean"] is None else f"{v['mean']:.3f} ± {v['std']:.3f} (n={v['n']})")
        table.add_row(label + (" (reference)" if s["reference"] else ""), str(s["videos"]), *cells)
    console = Console()
    console.print(table)
    for label, s in results.get("sampson", {}).items():
        for kind in ("temporal", "crossview"):
            k = s.get(kind)
            if k and k.get("pairs_skipped"):
                console.print(f"  {label}: sampson_{kind} skipped {k['pairs_skipped']} of "
                              f"{k['pairs'] + k['pairs_skipped']} frame pairs {k['skip_reasons']}")
        if s.get("videos_skipped"):
            console.print(f"  {label}: {s['videos_skipped']} video(s) could not be scored (see videos.jsonl status)")
    j = results["judge"]
    if j["status"] == "skipped":
        console.print(f"  judge skipped: {j['reason']}")
    elif j["status"] == "ran":
        for m, c in j["counts"].items():
            console.print(f"  {m}: {c['ok']} scored, {c['cached']} from cache, {c['parse_failed']} unparsable (excluded), "
                          f"{c['error']} failed, {c['skipped']} skipped")


# ---------------------------------------------------------------------------------------- stage
def run(cfg: Any) -> dict[str, Any]:
    """Score every video of the configured generation folders; write and return results.json's content."""
    t0 = time.time()
    metrics = check_metrics(cfg.metrics)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    entries, runs = collect_entries(cfg.runs, cfg.max_videos)
    if not entries:
        raise EvaluationError(f"no videos in {cfg.runs}: the generation folders' generations.jsonl are empty")
    sampson_metrics = [m for m in metrics if m in SAMPSON_METRICS]
    sampson = run_sampson(entries, cfg, sampson_metrics) if sampson_metrics else {}
    judged, judge_status = run_judge(entries, cfg, metrics, out)
    rows = []
    for e in entries:
        row: dict[str, Any] = {"model": e.model, "name": e.name, "seed": e.seed, "run": e.run, "reference": e.reference,
                               "video": str(e.video.resolve()), "views": {k: str(v.resolve()) for k, v in e.views.items()},
                               "instruction": e.instruction, "prompt": e.prompt}
        row.update(sampson.get(e.key, {}))
        row.update(judged.get(e.key, {}))
        row["status"] = row.get("sampson_status", "ok")
        rows.append(row)
    models, inputs = aggregate(rows, metrics)
    results: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "out": str(out), "config": cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else dict(vars(cfg)),
        "runs": runs, "metrics": metrics, "lower_is_better": sorted(set(metrics) & LOWER_IS_BETTER),
        "models": models, "inputs": inputs, "judge": judge_status,
        "sampson": _sampson_summary(entries, sampson, sampson_metrics),
        "files": {"videos": "videos.jsonl", "csv": "videos.csv"}, "seconds": round(time.time() - t0, 2),
    }
    write_rows(out, rows, metrics)
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print_summary(results)
    return results


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
