"""`worldtune report`: one HTML page (plus an assets folder) and a Markdown summary of an evaluation.

What it shows: the models x metrics table (mean ± std, n; the baselines of the generation folder, marked as
such, and the real clips as a reference row),
one bar plot per metric, the training loss curves of the runs given (`report.runs`: folders with
`metrics.jsonl` lines holding at least `step` and `loss`, and `run.json`), and per input a row of
videos side by side (base, each adapter, the real clip; same seed), each with its scores and the
judge's explanation. When the judge was skipped, the page says so and why.

The page works offline: no scripts or fonts from the network; plots are PNG files and videos are
copied into `assets/`, referenced by relative paths, so the folder can be zipped and moved.
Videos are copied as they are when browsers play them (H.264 mp4, VP9/AV1 WebM); anything else is
re-encoded to VP9 WebM (`report.video_format = "webm"` forces that, for Chromium builds without
proprietary codecs).
"""

from __future__ import annotations

import html
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from worldtune.atomic import atomic_write_text
from worldtune.errors import EvaluationError
from worldtune.eval.dynamics import OTHER_SUFFIX
from worldtune.eval.report_behaviour import (_end_effector_html, _end_effector_markdown, _task_html, _task_markdown,
                                             plot_tracks)
from worldtune.eval.report_format import REFERENCE_COLOUR, _fmt, delta_text, display_name, model_colours
from worldtune.eval.sampson import KINDS
from worldtune.eval.scores import DYNAMIC, DYNAMIC_SCOPE, floor_suffix, is_reference
from worldtune.eval.stats import MIN_CI_INPUTS

PLAYABLE = {"h264": ".mp4", "vp9": ".webm", "av1": ".webm"}
METRIC_TITLES = {"sampson_temporal": "Sampson error, temporal (px)", "sampson_crossview": "Sampson error, cross-view (px)",
                 "sampson_crossview_dynamic": "Sampson error, cross-view, what moves (px)",
                 "psnr": "PSNR vs real (dB)", "ssim": "SSIM vs real", "dynamic_psnr": "dynamic PSNR vs real (dB)",
                 "motion_iou_spatial": "motion-mask IoU, spatial", "motion_iou_spatiotemporal": "motion-mask IoU, spatiotemporal",
                 "warp_error": "flow-warping error (0-255)",
                 "ee_track_error": "end-effector track error vs true path (px)",
                 "judge_physics": "Judge: physical plausibility (1-5)", "judge_instruction": "Judge: instruction following (1-5)"}


# ---------------------------------------------------------------------------------------- inputs
def load_eval(folder: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """results.json and videos.jsonl of an evaluation folder."""
    root = Path(folder)
    path = root / "results.json"
    if not path.is_file():
        raise EvaluationError(f"{path} not found: run `worldtune evaluate` first, or set report.eval to its out folder")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise EvaluationError(f"{path}: not valid JSON ({e.msg}); rerun `worldtune evaluate`") from None
    if results.get("format") != "worldtune.eval":
        raise EvaluationError(f"{path}: not a worldtune evaluation (format {results.get('format')!r})")
    rows = []
    vpath = root / results.get("files", {}).get("videos", "videos.jsonl")
    if vpath.is_file():
        rows = [json.loads(line) for line in vpath.read_text(encoding="utf-8").splitlines() if line.strip()]
    return results, rows


def load_run(folder: str | Path) -> dict[str, Any]:
    """A training run's name and its (step, loss) points; `note` says what was missing."""
    root = Path(folder)
    run: dict[str, Any] = {"path": str(root), "name": root.name, "steps": [], "loss": [], "val_steps": [], "val_loss": [],
                           "note": None}
    info = root / "run.json"
    if info.is_file():
        try:
            meta = json.loads(info.read_text(encoding="utf-8"))
            run["name"] = str(meta.get("name") or root.name)
            run["meta"] = {k: meta[k] for k in ("mode", "model", "steps", "lr") if k in meta}
            lora = meta.get("lora") or {}
            run["settings"] = {k: v for k, v in {
                "mode": meta.get("mode"), "model": meta.get("model"), "steps": meta.get("steps"),
                "dataset": meta.get("dataset"), "rank": lora.get("rank"), "alpha": lora.get("alpha"),
                "targets": ",".join(lora.get("targets") or []) or None}.items() if v is not None}
        except json.JSONDecodeError:
            run["note"] = "run.json unreadable"
    metrics = root / "metrics.jsonl"
    if not metrics.is_file():
        run["note"] = "no metrics.jsonl"
        return run
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            if "val_loss" in row and math.isfinite(float(row["val_loss"])):
                run["val_steps"].append(int(row["step"]))
                run["val_loss"].append(float(row["val_loss"]))
            step, loss = int(row["step"]), float(row["loss"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue  # validation lines, torn lines
        if math.isfinite(loss):
            run["steps"].append(step)
            run["loss"].append(loss)
    if not run["steps"]:
        run["note"] = "metrics.jsonl has no step/loss lines"
    return run


BASELINE_NOTE = ("Baselines are not models: 'first frame repeated' holds the conditioning frame for every frame "
                 "(what a model without dynamics scores); 'real clip through the VAE' is the real continuation "
                 "encoded and decoded by the model's own VAE (the most any generated video can reach through it). A "
                 "model is worth its cost where it beats the first, and the gap to the second is what is left to gain")


# ----------------------------------------------------------------------------------------- plots
def plot_metric(results: dict[str, Any], metric: str, path: Path, colours: dict[str, str] | None = None) -> Path | None:
    """Bar plot of one metric per model, each in its colour (error bars: std over videos)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = colours or model_colours(list(results["models"]))
    labels, means, stds, colors = [], [], [], []
    for label, s in results["models"].items():
        st = s.get(metric) or {}
        if st.get("mean") is None:
            continue
        labels.append(label)
        means.append(st["mean"])
        stds.append(st["std"] or 0.0)
        colors.append(colours.get(label, REFERENCE_COLOUR))
    if not labels:
        return None
    fig, ax = plt.subplots(figsize=(max(3.5, 1.1 * len(labels) + 1.5), 3.0), dpi=110)
    bars = ax.bar(labels, means, yerr=stds, color=colors, capsize=4)
    for bar, label in zip(bars, labels):  # baselines hatched: not models
        if results["models"][label].get("baseline"):
            bar.set_hatch("//")
    ax.set_title(METRIC_TITLES.get(metric, metric), fontsize=10)
    if metric in results.get("lower_is_better", []):
        ax.set_ylabel("lower is better", fontsize=8)
    else:
        ax.set_ylabel("higher is better", fontsize=8)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_losses(runs: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Training loss of every run against step (raw, faint; and an EMA, bold)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in runs if r["steps"]]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.2), dpi=110)
    for i, r in enumerate(runs):
        color = f"C{i % 10}"
        ax.plot(r["steps"], r["loss"], color=color, alpha=0.25, linewidth=0.8)
        ax.plot(r["steps"], _ema(r["loss"]), color=color, linewidth=1.8, label=r["name"])
        if r.get("val_steps"):
            ax.plot(r["val_steps"], r["val_loss"], "o--", color=color, markersize=4, label=f"{r['name']} held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (training: EMA; held-out: points)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _ema(values: Sequence[float], decay: float | None = None) -> list[float]:
    """Exponential moving average; by default it spans ~1/10 of the points (a short log is barely smoothed)."""
    if decay is None:
        decay = min(0.9, max(0.0, 1.0 - 10.0 / max(len(values), 1)))
    out, acc = [], None
    for v in values:
        acc = v if acc is None else decay * acc + (1 - decay) * v
        out.append(acc)
    return out


def plot_curve(rows: Sequence[dict[str, Any]], metric: str, path: Path,
               colours: dict[str, str] | None = None) -> Path | None:
    """A pixel metric over the horizon: per model (each in its colour), the mean over its videos of the per-frame
    curve."""
    by_model: dict[str, list[list[float | None]]] = {}
    baselines = {r["model"] for r in rows if r.get("baseline")}
    for r in rows:
        c = (r.get("pixel_curves") or {}).get(metric)
        if c:
            by_model.setdefault(r["model"], []).append(c)
    if not by_model:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = sorted(by_model, key=lambda m: (m in baselines, m != "base", m))
    colours = colours or model_colours(order)
    fig, ax = plt.subplots(figsize=(4.2, 3.0), dpi=110)
    for label in order:
        curves = by_model[label]
        n = min(len(c) for c in curves)
        mean = [np.nanmean([np.nan if c[i] is None else c[i] for c in curves]) for i in range(n)]
        ax.plot(range(1, n + 1), mean, label=label, color=colours.get(label, REFERENCE_COLOUR),
                linestyle=":" if label in baselines else "--" if label.endswith(OTHER_SUFFIX) else "-")
    ax.set_title(f"{METRIC_TITLES.get(metric, metric)} over the horizon", fontsize=9)
    ax.set_xlabel("generated frame (after the conditioning frames)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------- videos
def poster(src: str | Path, dst: Path) -> Path | None:
    """The video's first frame as a JPEG, shown before it plays (None when unreadable)."""
    import cv2

    from worldtune.eval.video import VideoReadError, read_video

    try:
        frames, _ = read_video(src, max_frames=1)
    except VideoReadError:
        return None
    cv2.imwrite(str(dst), cv2.cvtColor(frames[0], cv2.COLOR_RGB2BGR))
    return dst

def publish_video(src: str | Path, dst_stem: Path, fmt: str = "auto") -> Path | None:
    """Copy (or re-encode to VP9 WebM) a video into the assets folder; None when it is unreadable."""
    from worldtune.eval.video import VideoReadError, read_video, video_codec, write_video

    src = Path(src)
    codec = video_codec(src)
    if codec is None:
        return None
    if fmt == "auto" and codec in PLAYABLE or fmt == "mp4" and codec == "h264":
        dst = dst_stem.with_suffix(PLAYABLE[codec])
        shutil.copyfile(src, dst)
        return dst
    try:
        frames, fps = read_video(src)
    except VideoReadError:
        return None
    if fmt == "mp4":
        return write_video(dst_stem.with_suffix(".mp4"), frames, fps or 16.0, codec="libx264")
    return write_video(dst_stem.with_suffix(".webm"), frames, fps or 16.0, codec="libvpx-vp9")


def example_rows(rows: Sequence[dict[str, Any]], limit: int) -> list[tuple[str, Any, list[dict[str, Any]]]]:
    """Per (input, seed): base first, then adapters, then the baselines, then the real clip; inputs in name order."""
    gen = [r for r in rows if not r.get("reference")]
    refs: dict[str, list[dict[str, Any]]] = {}  # one real clip per input and folder
    for r in rows:
        if r.get("reference"):
            refs.setdefault(r["name"], []).append(r)
    keys = sorted({(r["name"], r["seed"]) for r in gen}, key=lambda k: (k[0], k[1] if k[1] is not None else -1))
    out = []
    for name, seed in keys:
        cells = sorted((r for r in gen if r["name"] == name and r["seed"] == seed),
                       key=lambda r: (bool(r.get("baseline")), r["model"] != "base", r["model"]))
        cells.extend(refs.get(name, []))
        out.append((name, seed, cells))
    seen: list[str] = []
    picked = []
    for name, seed, cells in out:  # the first seed of each input first, then more seeds if room is left
        if name not in seen:
            seen.append(name)
            picked.append((name, seed, cells))
    for item in out:
        if item not in picked:
            picked.append(item)
    return picked[:limit]


# ------------------------------------------------------------------------------------------ html
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1400px;
padding:0 1em;color:#222}
h1{margin-bottom:0}.sub{color:#666;margin-top:.2em}
td.best{font-weight:600;background:#e8f5e9}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.35em .7em;text-align:right}
th:first-child,td:first-child{text-align:left}tr.ref td{color:#666;font-style:italic}
tr.baseline td{color:#555;background:#f6f6f6}
.note{background:#fff6d6;border:1px solid #e7c450;padding:.6em 1em;border-radius:4px;margin:1em 0}
.plots img{max-width:460px;margin:.3em}
.example{border-top:1px solid #ddd;padding:.8em 0}.cells{display:flex;flex-wrap:wrap;gap:1em}
.cell{width:400px}.cell video{width:100%;background:#000}.cell h4{margin:.2em 0}
.cell .m{font-size:.85em;color:#333}.cell pre{white-space:pre-wrap;font-size:.8em;background:#f6f6f6;padding:.4em;margin:.3em 0}
.missing{width:100%;height:120px;background:#eee;color:#888;display:flex;align-items:center;justify-content:center}
"""


DYNAMIC_NOTE = DYNAMIC_SCOPE  # what the dynamic figure resolves, under its table


def floor_text(results: dict[str, Any], metric: str, label: str) -> str:
    """' (floor 2.61 px)' beside a model's value of the dynamic figure: the real clips' mean (empty elsewhere)."""
    return floor_suffix(results.get("models", {}), metric, label)


def rig_notes(results: dict[str, Any]) -> list[str]:
    """Why a fixed pair has no rig geometry (no_reference) or rests on a calibration the real clip could not check,
    per pair and reason, with the number of inputs it applies to (results.json -> rig -> inputs)."""
    seen: dict[tuple[str, str], int] = {}
    for ref in ((results.get("rig") or {}).get("inputs") or {}).values():
        for pair, p in (ref.get("pairs") or {}).items():
            if not p.get("available"):
                why = f"no rig geometry ({p.get('mode')}): {p.get('reason') or 'no reason recorded'}"
            elif (p.get("checks") or {}).get("unverified"):
                why = f"calibration kept, unverified: {p['checks']['unverified']}"
            else:
                continue
            seen[pair, why] = seen.get((pair, why), 0) + 1
    return [f"cross-view pair {pair}, {n} input{'s' if n != 1 else ''}: {why}" for (pair, why), n in sorted(seen.items())]


def bimodal_notes(results: dict[str, Any]) -> list[str]:
    """Models whose videos' per-frame Sampson values fall in two groups: their medians jump between encodes."""
    notes = []
    for label, s in results.get("sampson", {}).items():
        for kind in KINDS:
            k = s.get(kind) or {}
            if k.get("bimodal_videos"):
                notes.append(f"sampson_{kind}, {label}: {k['bimodal_videos']} of {k.get('n', 0) + k.get('n_nan', 0)} "
                             "videos have per-frame values in two groups; their median says which group is larger and "
                             "can jump between encodes of the same video (sampson_detail in videos.jsonl has both groups)")
    return notes


def _metrics_table_html(results: dict[str, Any]) -> str:
    metrics = results["metrics"]
    lower = set(results.get("lower_is_better", []))
    head = "".join(f"<th>{html.escape(m)} {'↓' if m in lower else '↑'}</th>" for m in metrics)
    body = []
    for label, s in results["models"].items():
        best = set(s.get("best", []))
        cells = "".join(f"<td{' class=best' if m in best else ''}>{_fmt(s.get(m))}{html.escape(floor_text(results, m, label))}</td>"
                        for m in metrics)
        kind = "ref" if s.get("reference") else "baseline" if s.get("baseline") else ""
        body.append(f"<tr class='{kind}'><td>{html.escape(display_name(label, s))}</td><td>{s['videos']}</td>{cells}</tr>")
    table = f"<table><tr><th>model</th><th>videos</th>{head}</tr>{''.join(body)}</table>"
    deltas = []
    for label, s in results["models"].items():
        if "vs_base" in s:
            cells = "".join(f"<td title='{html.escape(s['vs_base'][m].get('reason') or '')}'>{html.escape(delta_text(s['vs_base'][m]))}</td>"
                            for m in metrics)
            deltas.append(f"<tr class='{'baseline' if s.get('baseline') else ''}'>"
                          f"<td>{html.escape(display_name(label, s))} − base</td>{cells}</tr>")
    if DYNAMIC in metrics:
        table += f"<p>{html.escape(DYNAMIC_NOTE)}.</p>"
    if any(s.get("baseline") for s in results["models"].values()):
        table += f"<p>{html.escape(BASELINE_NOTE)}.</p>"
    if deltas:
        table += (f"<h3>Paired difference to the base model</h3><p>mean over the same (input, seed) pairs, "
                  f"[95 % CI over inputs; none below {MIN_CI_INPUTS} inputs], win rate, n pairs / inputs; hover an "
                  f"empty cell for the reason; a baseline's row "
                  f"below 0 (above 0 for ↓ metrics) means the base model beats it</p>"
                  f"<table><tr><th>model</th>{head}</tr>{''.join(deltas)}</table>")
    return table + _sensitivity_html(results) + _closed_loop_html(results) + _views_html(results)


SENSITIVITY_NOTE = ("the same model, clip, first frame and seed, driven by the clip's own actions minus driven by "
                    "another episode's actions: mean [95 % CI over clips], win rate, n pairs / clips. A model that "
                    "uses its actions reads above 0 on PSNR, SSIM and dynamic PSNR; one that ignores them reads 0")


def _sensitivity_html(results: dict[str, Any]) -> str:
    """The action-sensitivity table (evaluate.mode = actions): overall, then per camera view."""
    metrics = results["metrics"]
    lower = set(results.get("lower_is_better", []))
    rows = []
    for label, s in results["models"].items():
        for where, d in [("all views", s.get("action_sensitivity"))] + list((s.get("action_sensitivity_views") or {}).items()):
            if not d:
                continue
            cells = "".join(f"<td title='{html.escape((d.get(m) or {}).get('reason') or '')}'>"
                            f"{html.escape(delta_text(d[m])) if m in d else '—'}</td>" for m in metrics)
            rows.append(f"<tr><td>{html.escape(label)}</td><td>{html.escape(where)}</td>{cells}</tr>")
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(m)} {'↓' if m in lower else '↑'}</th>" for m in metrics)
    return (f"<h3>Action sensitivity: own actions − another episode's actions</h3><p>{SENSITIVITY_NOTE}.</p>"
            f"<table><tr><th>model</th><th>view</th>{head}</tr>{''.join(rows)}</table>")


def _closed_loop_html(results: dict[str, Any]) -> str:
    """Closed-loop action consistency (evaluate.actions.idm): generated videos labelled back."""
    from worldtune.eval.closed_loop import NOTE, rows_for_display

    parts = []
    for kind, per in (results.get("closed_loop") or {}).items():
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                       for row in rows_for_display(per))
        parts.append(f"<h3>Closed-loop action consistency ({html.escape(kind)} labeller)</h3>"
                     f"<p>{html.escape(NOTE)}.</p><table><tr><th>model</th><th>normalised MSE [95 % CI]</th>"
                     f"<th>videos / inputs</th><th>worst entries</th></tr>{body}</table>")
    return "".join(parts)


def _closed_loop_markdown(results: dict[str, Any]) -> list[str]:
    """The closed-loop tables of `_closed_loop_html` as markdown lines."""
    from worldtune.eval.closed_loop import NOTE, rows_for_display

    lines = []
    for kind, per in (results.get("closed_loop") or {}).items():
        lines += [f"## Closed-loop action consistency ({kind} labeller)", "", NOTE + ".", "",
                  "| model | normalised MSE [95 % CI] | videos / inputs | worst entries |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows_for_display(per)] + [""]
    return lines


def _views_html(results: dict[str, Any]) -> str:
    """Pixel metrics per camera view (multi-camera layouts)."""
    rows, metrics = [], []
    for label, s in results["models"].items():
        for role, per in (s.get("views") or {}).items():
            metrics = metrics or list(per)
            rows.append(f"<tr><td>{html.escape(display_name(label, s))}</td><td>{html.escape(role)}</td>"
                        + "".join(f"<td>{_fmt(per.get(m))}</td>" for m in metrics) + "</tr>")
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(m)}</th>" for m in metrics)
    return (f"<h3>Per camera view</h3><p>mean ± std over videos of each view's own value</p>"
            f"<table><tr><th>model</th><th>view</th>{head}</tr>{''.join(rows)}</table>")


def _judge_note(results: dict[str, Any]) -> str:
    j = results.get("judge", {})
    if j.get("status") == "skipped":
        return f"<div class='note'><b>The VLM judge was skipped:</b> {html.escape(j.get('reason', ''))}. Judge columns are empty.</div>"
    if j.get("status") == "ran":
        parts = [f"{html.escape(m)}: {c['ok'] + c['cached']} scored, {c['parse_failed']} unparsable (excluded), "
                 f"{c['error']} failed" for m, c in j.get("counts", {}).items()]
        return (f"<p>Judge: <code>{html.escape(str(j.get('model')))}</code> at {html.escape(str(j.get('endpoint')))}, "
                f"{j.get('fps')} fps, {html.escape(str(j.get('input')))} input. " + "; ".join(parts) + ".</p>")
    return ""


def unmeasured_notes(results: dict[str, Any]) -> list[str]:
    """Why a Sampson column has no value for the real clips: their commonest skip reason. A column the real footage
    cannot be scored on is read as what the footage allows (wide baselines, low texture, small frames), not as a
    model's failure; where some model's row still has a value, that value rests on the few frames a generated video
    happened to give matches on, with no real figure to read it against, and the note says so."""
    notes, rows = [], results.get("models", {})
    for kind in KINDS:
        metric = f"sampson_{kind}"
        if metric not in results.get("metrics", []):
            continue
        if any((s.get(metric) or {}).get("n") for label, s in rows.items() if is_reference(label)):
            continue
        real = next((sc.get(kind) or {} for label, sc in results.get("sampson", {}).items()
                     if is_reference(label)), {})
        reasons = real.get("skip_reasons") or {}
        if not reasons:
            continue
        reason, count = max(reasons.items(), key=lambda kv: kv[1])
        why = (f"(their commonest reason: {reason}, {count} of {real.get('pairs', 0) + real.get('pairs_skipped', 0)} "
               f"frame pairs); this footage does not allow the measure at this frame size")
        scored = sorted(label for label, s in rows.items() if (s.get(metric) or {}).get("n"))
        if scored:
            notes.append(f"{metric}: the real clips have no value {why}: the values of {', '.join(scored)} rest on "
                         f"the few videos that gave matches, with no real figure to read them against")
        else:
            notes.append(f"{metric}: no row has a value, the real clips' included {why}, whatever the model")
    return notes


def _skips_html(results: dict[str, Any]) -> str:
    items = []
    for label, s in results.get("sampson", {}).items():
        for kind in KINDS:
            k = s.get(kind)
            if k and k.get("pairs_skipped"):
                items.append(f"<li>{html.escape(label)}, {kind}: {k['pairs_skipped']} of {k['pairs'] + k['pairs_skipped']} "
                             f"frame pairs skipped {html.escape(json.dumps(k['skip_reasons']))}</li>")
        if s.get("videos_skipped"):
            items.append(f"<li>{html.escape(label)}: {s['videos_skipped']} video(s) could not be scored</li>")
    notes = "".join(f"<div class='note'>{html.escape(n)}</div>"
                    for n in unmeasured_notes(results) + bimodal_notes(results) + rig_notes(results))
    return notes + (f"<h3>Skipped</h3><ul>{''.join(items)}</ul>" if items else "")


def _cell_html(row: dict[str, Any], video: str | None, metrics: Sequence[str]) -> str:
    label = "real clip" + (f" ({row['model'].split(':', 1)[1]})" if ":" in row["model"] else "") if row.get("reference") \
        else display_name(row["model"], row)
    still = Path(video).with_suffix(".jpg").as_posix() if video else None
    media = (f"<video controls muted loop playsinline preload='metadata' poster='{html.escape(still)}' "
             f"src='{html.escape(video)}'></video>" if video else "<div class='missing'>video unavailable</div>")
    vals = []
    for m in metrics:
        v = row.get(m)
        if v is not None:
            vals.append(f"{html.escape(m)}: <b>{v:.2f}</b>" if isinstance(v, float) else f"{html.escape(m)}: <b>{v}</b>")
    if row.get("status", "ok") != "ok":
        vals.append(html.escape(row["status"]))
    notes = "".join(f"<pre><b>{html.escape(m)}</b>: {html.escape(row[f'{m}_explanation'])}</pre>"
                    for m in metrics if row.get(f"{m}_explanation"))
    return f"<div class='cell'><h4>{html.escape(label)}</h4>{media}<div class='m'>{' · '.join(vals)}</div>{notes}</div>"


# ----------------------------------------------------------------------------------------- stage
def run(cfg: Any) -> dict[str, Any]:
    """Write <out>/report.html, <out>/report.md and <out>/assets/; return what was written."""
    results, rows = load_eval(cfg.eval)
    out = Path(cfg.out)
    assets = out / "assets"
    (assets / "videos").mkdir(parents=True, exist_ok=True)
    metrics = results["metrics"]

    colours = model_colours(list(results["models"]))
    plots = {m: plot_metric(results, m, assets / f"metric_{m}.png", colours) for m in metrics}
    plots.update({f"{m} (horizon)": plot_curve(rows, m, assets / f"curve_{m}.png", colours) for m in metrics})
    runs = [load_run(r) for r in cfg.runs]
    loss_png = plot_losses(runs, assets / "loss.png")
    tracks_png = plot_tracks(rows, assets / "ee_tracks.png", colours) if (results.get("end_effector") or {}).get(
        "status") == "ok" else None

    examples = example_rows(rows, cfg.max_examples)
    published: dict[str, str | None] = {}
    videos_html = []
    from worldtune.console import Progress

    with Progress("report", sum(len(c) for _, _, c in examples), "videos") as bar:
        for name, seed, cells in examples:
            parts = []
            for row in cells:
                stem = f"{row['model']}__{name}" + (f"__s{seed}" if not row.get("reference") else "__real")
                stem = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in stem)
                if row["video"] not in published:
                    dst = publish_video(row["video"], assets / "videos" / stem, cfg.video_format)
                    if dst is not None:
                        poster(row["video"], dst.with_suffix(".jpg"))
                    published[row["video"]] = dst.relative_to(out).as_posix() if dst else None
                parts.append(_cell_html(row, published[row["video"]], metrics))
                bar.advance()
            instr = cells[0].get("instruction") or ""
            videos_html.append(f"<div class='example'><h3>{html.escape(name)} · seed {seed}</h3>"
                               f"<p>{html.escape(instr)}</p><div class='cells'>{''.join(parts)}</div></div>")

    run_notes = "".join(f"<li>{html.escape(r['name'])}: {html.escape(r['note'])}</li>" for r in runs if r["note"])
    run_notes += "".join(f"<li>{html.escape(r['name'])}: " + ", ".join(f"{k} {html.escape(str(v))}" for k, v in r["settings"].items())
                         + "</li>" for r in runs if r.get("settings"))
    loss_html = ("<img src='assets/loss.png' alt='training loss'>" if loss_png else
                 "<p>No training loss curves (no run folders with metrics.jsonl were given in report.runs).</p>")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(cfg.title)}</title><style>{CSS}</style></head>
<body>
<h1>{html.escape(cfg.title)}</h1>
<p class="sub">evaluation {html.escape(results.get('created', ''))} · {len(rows)} videos · report written {time.strftime('%Y-%m-%d %H:%M')}</p>
{_judge_note(results)}
<h2>Models × metrics</h2>
<p>mean ± std over videos (n = videos with a value). Sampson error in pixels (lower is better; &lt;1 excellent,
1–3 good, 3–5 fair, &gt;5 poor); a video's Sampson value is its median over frame pairs. Judge scores 1–5.</p>
{_metrics_table_html(results)}
{_end_effector_html(results, tracks_png)}
{_task_html(results)}
{_skips_html(results)}
<h2>Plots</h2>
<div class="plots">{''.join(f"<img src='assets/{p.name}' alt='{html.escape(m)}'>" for m, p in plots.items() if p)}</div>
<h2>Training</h2>
{loss_html}
{f'<ul>{run_notes}</ul>' if run_notes else ''}
<h2>Examples</h2>
<p>Same input and seed, side by side: base model, adapters, the baselines, and the real clip.</p>
{''.join(videos_html) or '<p>No videos.</p>'}
</body></html>
"""
    atomic_write_text(out / "report.html", page)
    atomic_write_text(out / "report.md", markdown_summary(results, runs, plots, loss_png, cfg.title, tracks_png))
    written = {"html": str(out / "report.html"), "markdown": str(out / "report.md"),
               "plots": [str(p) for p in plots.values() if p] + [str(p) for p in (loss_png, tracks_png) if p],
               "videos": sorted(v for v in published.values() if v), "examples": len(examples)}
    from rich.console import Console

    Console().print(f"report: {out / 'report.html'} ({len(examples)} examples, {len(written['videos'])} videos) "
                    f"and {out / 'report.md'}")
    return written


def markdown_summary(results: dict[str, Any], runs: Sequence[dict[str, Any]], plots: dict[str, Path | None],
                     loss_png: Path | None, title: str, tracks_png: Path | None = None) -> str:
    """The same table in Markdown, for a PR description or a README."""
    metrics = results["metrics"]
    lower = set(results.get("lower_is_better", []))
    lines = [f"# {title}", ""]
    j = results.get("judge", {})
    if j.get("status") == "skipped":
        lines += [f"> **The VLM judge was skipped:** {j.get('reason')}.", ""]
    lines += ["| model | videos | " + " | ".join(f"{m} {'↓' if m in lower else '↑'}" for m in metrics) + " |",
              "|---|---:|" + "---:|" * len(metrics)]
    for label, s in results["models"].items():
        lines.append(f"| {display_name(label, s)} | {s['videos']} | "
                     + " | ".join(_fmt(s.get(m)) + floor_text(results, m, label) for m in metrics) + " |")
    lines += ["", "mean ± std over videos; Sampson error in pixels (a video's value is its median over frame pairs).", ""]
    if DYNAMIC in metrics:
        lines += [DYNAMIC_NOTE + ".", ""]
    lines += [line for n in unmeasured_notes(results) + bimodal_notes(results) + rig_notes(results)
              for line in (f"> {n}.", "")]
    if any(s.get("baseline") for s in results["models"].values()):
        lines += [BASELINE_NOTE + ".", ""]
    deltas = [(display_name(label, s), s["vs_base"]) for label, s in results["models"].items() if "vs_base" in s]
    if deltas:
        lines += ["## Paired difference to the base model", "",
                  f"mean over the same (input, seed) pairs, [95 % CI over inputs; none below {MIN_CI_INPUTS} inputs], "
                  "win rate, n pairs / inputs", "",
                  "| model | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
        lines += [f"| {label} − base | " + " | ".join(delta_text(d[m]) for m in metrics) + " |" for label, d in deltas]
        lines.append("")
    sens = [(label, s["action_sensitivity"]) for label, s in results["models"].items() if "action_sensitivity" in s]
    if sens:
        lines += ["## Action sensitivity: own actions − another episode's actions", "", SENSITIVITY_NOTE + ".", "",
                  "| model | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
        lines += [f"| {label} | " + " | ".join(delta_text(d[m]) for m in metrics) + " |" for label, d in sens]
        lines.append("")
    lines += _closed_loop_markdown(results)
    lines += _end_effector_markdown(results, tracks_png)
    lines += _task_markdown(results)
    views = [(display_name(label, s), role, per) for label, s in results["models"].items()
             for role, per in (s.get("views") or {}).items()]
    if views:
        vm = list(views[0][2])
        lines += ["## Per camera view", "", "| model | view | " + " | ".join(vm) + " |", "|---|---|" + "---:|" * len(vm)]
        lines += [f"| {label} | {role} | " + " | ".join(_fmt(per.get(m)) for m in vm) + " |" for label, role, per in views]
        lines.append("")
    for m, p in plots.items():
        if p:
            lines.append(f"![{m}](assets/{p.name})")
    if loss_png:
        lines += ["", "## Training", "", "![training loss](assets/loss.png)", ""]
        for r in runs:
            if r["steps"]:
                lines.append(f"- {r['name']}: {len(r['steps'])} logged steps, last loss {r['loss'][-1]:.4f} at step {r['steps'][-1]}")
    return "\n".join(lines) + "\n"
