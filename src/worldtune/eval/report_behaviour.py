"""The report's sections on what the videos make the robot do: the gripper's track against its true path
(worldtune.eval.end_effector; a table and a figure), whether the task gets done (worldtune.eval.task_success),
and whether the input or the noise seed sets a video more (worldtune.eval.seed_spread); each in HTML and Markdown.

A module of its own because these sections read only their own parts of results.json (`end_effector`,
`task_success`, `input_vs_seed`) and the video rows' tracks; worldtune.eval.report places them on the page and in
report.md.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from worldtune.eval.report_format import REFERENCE_COLOUR, _fmt, delta_text, display_name

EE_NOTE = ("the gripper found in each exterior view of a video against its true path (the dataset's recorded "
           "gripper positions through its recorded cameras), median px over the frames after the first, at the clip "
           "view's size; the real clips' row is the detector's own error (its floor). A frame where the gripper is "
           "not found keeps the last position found, so a video that loses the arm reads as holding it still")


def _end_effector_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(model, view, median px mean ± std, − base per view, found share) per model and exterior view."""
    ee = results.get("end_effector") or {}
    out = []
    for label, m in (ee.get("models") or {}).items():
        s = results["models"].get(label, {})
        found = "—" if m.get("found") is None else f"{100 * m['found']:.0f} %"
        for role, st in m.get("views", {}).items():
            d = (m.get("views_vs_base") or {}).get(role)
            out.append((display_name(label, s), role, _fmt(st), delta_text(d) if d else "", found))
    return out


def plot_tracks(rows: Sequence[dict[str, Any]], path: Path, colours: dict[str, str]) -> Path | None:
    """One input's gripper tracks in each exterior view: the true path, and each video's (seed 0 or the first)."""
    real = next((r for r in rows if r.get("reference") and r.get("ee_truth")), None)
    if real is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roles = sorted(real["ee_truth"])
    mine = [r for r in rows if r["name"] == real["name"] and r.get("ee_tracks") and r["run"] == real["run"]]
    seen, videos = set(), []
    for r in sorted(mine, key=lambda r: (r.get("seed") or 0)):
        if r["model"] not in seen:
            seen.add(r["model"])
            videos.append(r)
    fig, axes = plt.subplots(1, len(roles), figsize=(4.2 * len(roles), 3.0), dpi=110, squeeze=False)
    for ax, role in zip(axes[0], roles):
        h, w = real["ee_view_sizes"][role]
        t = np.asarray(real["ee_truth"][role])
        ax.plot(t[:, 0], t[:, 1], "-", color="black", lw=3, alpha=0.35, label="true path")
        for r in videos:
            tr = np.asarray((r["ee_tracks"] or {}).get(role) or [])
            if len(tr):
                name = "real clip (detected)" if r.get("reference") else r["model"]
                ax.plot(tr[:, 0], tr[:, 1], ".-", ms=3, lw=1, color=colours.get(r["model"], REFERENCE_COLOUR),
                        label=name)
        ax.plot(*t[0], "o", color="black", ms=5)
        ax.set_xlim(0, w - 1)
        ax.set_ylim(h - 1, 0)
        ax.set_aspect("equal")
        ax.set_title(f"{real['name']} · {role}", fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _end_effector_html(results: dict[str, Any], tracks_png: Path | None) -> str:
    ee = results.get("end_effector")
    if not ee:
        return ""
    if ee.get("status") != "ok":
        return f"<h3>End-effector track</h3><div class='note'>Absent: {html.escape(str(ee.get('reason')))}.</div>"
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in _end_effector_rows(results))
    img = f"<img src='assets/{tracks_png.name}' alt='gripper tracks'>" if tracks_png else ""
    return (f"<h3>End-effector track</h3><p>{html.escape(EE_NOTE)}.</p><table><tr><th>model</th><th>view</th>"
            f"<th>px ↓</th><th>− base</th><th>found</th></tr>{body}</table>{img}")


def _end_effector_markdown(results: dict[str, Any], tracks_png: Path | None) -> list[str]:
    ee = results.get("end_effector")
    if not ee:
        return []
    if ee.get("status") != "ok":
        return ["## End-effector track", "", f"Absent: {ee.get('reason')}.", ""]
    lines = ["## End-effector track", "", EE_NOTE + ".", "", "| model | view | px ↓ | − base | found |",
             "|---|---|---:|---|---:|"]
    lines += ["| " + " | ".join(row) + " |" for row in _end_effector_rows(results)]
    return lines + ([""] + ([f"![gripper tracks](assets/{tracks_png.name})", ""] if tracks_png else []))


TASK_NOTE = ("The block the task moves, found by its colour in the two exterior views and triangulated, against where "
             "the real clip puts it (the scene's recorded path), at the latest of the clip's last frames where the real "
             "clip shows it; within 4 cm counts as done, not found as not done. Counted per input, on its first noise "
             "seed ('every seed': all videos). 'Block moves' counts only the inputs "
             "where the real block has moved by then (holding the first frame cannot do those). The real clips' row "
             "is the check that the detector reads these views; 'seen at the start': videos whose first frame shows "
             "the block where it is (a decoder that loses its colour cannot be read; the real clip through the VAE "
             "bounds what any video that VAE decodes can score)")
SPREAD_NOTE = ("How differently two videos change from their first frames (mean absolute difference of each frame "
               "minus the first, grey levels), over pairs of videos of different inputs and over pairs of one input "
               "under different noise seeds; a ratio above 1 says the input sets the video more than the seed does "
               "(95 % bootstrap interval over inputs)")


def _task_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    """(model, done k/n [Wilson], block moves k/n, every seed k/n, seen at the start, not judged) per model."""
    ts = results.get("task_success") or {}
    out = []
    for label, m in (ts.get("models") or {}).items():
        s = results["models"].get(label, {})
        ci = f" [{m['ci_low']:.2f}, {m['ci_high']:.2f}]" if m.get("ci_low") is not None else ""
        v = m.get("videos") or {"done": m["done"], "n": m["n"]}
        out.append((display_name(label, s), f"{m['done']}/{m['n']}{ci}", f"{m['moved']['done']}/{m['moved']['n']}",
                    f"{v['done']}/{v['n']}", f"{m.get('seen_first', 0)}/{m['n']}", str(m["not_judged"])))
    return out


def _spread_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    """(model, across inputs, across seeds, ratio [CI] or why not) per model."""
    out = []
    for label, m in ((results.get("input_vs_seed") or {}).get("models") or {}).items():
        if m.get("ratio") is None:
            out.append((label, _num(m.get("across_inputs")), _num(m.get("across_seeds")), f"— ({m.get('reason')})"))
            continue
        ci = f" [{m['ci_low']:.2f}, {m['ci_high']:.2f}]" if m.get("ci_low") is not None else f" ({m.get('reason')})"
        out.append((label, _num(m["across_inputs"]), _num(m["across_seeds"]), f"{m['ratio']:.2f}{ci}"))
    return out


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _task_html(results: dict[str, Any]) -> str:
    ts = results.get("task_success")
    parts = []
    if ts and ts.get("status") != "ok":
        parts.append(f"<h3>Does it do the task?</h3><div class='note'>Absent: {html.escape(str(ts.get('reason')))}.</div>")
    elif ts:
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in _task_rows(results))
        parts.append(f"<h3>Does it do the task?</h3><p>{html.escape(TASK_NOTE)}.</p><table><tr><th>model</th>"
                     f"<th>inputs done (95 % CI)</th><th>block moves</th><th>every seed</th><th>seen at the start</th>"
                     f"<th>not judged</th></tr>"
                     f"{body}</table>")
    rows = _spread_rows(results)
    if rows:
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        parts.append(f"<h3>Across inputs vs across noise seeds</h3><p>{html.escape(SPREAD_NOTE)}.</p><table><tr>"
                     f"<th>model</th><th>across inputs</th><th>across seeds</th><th>ratio</th></tr>{body}</table>")
    return "".join(parts)


def _task_markdown(results: dict[str, Any]) -> list[str]:
    ts = results.get("task_success")
    lines: list[str] = []
    if ts and ts.get("status") != "ok":
        lines += ["## Does it do the task?", "", f"Absent: {ts.get('reason')}.", ""]
    elif ts:
        lines += ["## Does it do the task?", "", TASK_NOTE + ".", "",
                  "| model | inputs done (95 % CI) | block moves | every seed | seen at the start | not judged |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += ["| " + " | ".join(row) + " |" for row in _task_rows(results)] + [""]
    rows = _spread_rows(results)
    if rows:
        lines += ["## Across inputs vs across noise seeds", "", SPREAD_NOTE + ".", "",
                  "| model | across inputs | across seeds | ratio |", "|---|---:|---:|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows] + [""]
    return lines
