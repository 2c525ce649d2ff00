"""The console summary of `worldtune evaluate`: the scores, the paired differences to the base model, the action
sensitivity and what was skipped, in tables that fit an 80-column log.

A module of its own because it only reads results.json's content (worldtune.eval.scores makes the figures);
the scoring stage, worldtune.eval.evaluate, prints it once the results are written.
"""

from __future__ import annotations

from typing import Any, Sequence

from worldtune.eval.end_effector import METRIC as EE_METRIC
from worldtune.eval.sampson import KINDS
from worldtune.eval.scores import DYNAMIC, DYNAMIC_SCOPE, LOWER_IS_BETTER, floor_suffix


def print_summary(results: dict[str, Any]) -> None:
    """The scores (model, metric, mean ± std, n), the paired differences to the base and the action sensitivity
    (mean, 95 % CI, win rate, pairs and inputs), and what was skipped.

    A heading row per model, then a row per metric, not a column per metric: however many metrics were asked
    for and however long the model names, every table fits 80 columns, which is what a log file under SLURM is
    rendered at."""
    from rich.console import Console
    from rich.text import Text

    metrics = results["metrics"]
    console = Console()
    table = _long_table(f"worldtune evaluate: {results['out']}", ("mean", "± std", "videos"))
    for label, s in results["models"].items():
        table.add_row(Text(label + (" (reference)" if s["reference"] else " (baseline)" if s.get("baseline") else ""),
                           style="bold"))
        for i, m in enumerate(metrics):
            v = s[m]
            mean, std = ("—", "") if v["mean"] is None else (_num(v["mean"]), _num(v["std"]))
            table.add_row(f"  {m} {'↓' if m in LOWER_IS_BETTER else '↑'}", mean + floor_suffix(results["models"], m, label),
                          std, str(v["n"]), end_section=i == len(metrics) - 1)
    console.print(table)
    if DYNAMIC in metrics:
        console.print(f"  {DYNAMIC_SCOPE}.")
    for label, s in results["models"].items():
        if s.get("baseline") and s.get("description"):
            console.print(f"  baseline {label}: {s['description']}")
    notes: dict[str, dict[str, None]] = {}  # why a figure is missing -> the models it is missing for
    for key, title in (("vs_base", "model − base, paired over (input, seed); n = pairs/inputs"),
                       ("action_sensitivity", "own − another episode's actions, paired per clip; n = pairs/clips")):
        diffs = {label: s[key] for label, s in results["models"].items() if key in s}
        if diffs:
            console.print(_differences_table(title, diffs, metrics, notes))
    for why, where in notes.items():
        console.print(f"  {why} ({', '.join(where)})")
    for label, s in results.get("sampson", {}).items():
        for kind in KINDS:
            k = s.get(kind)
            if k and k.get("pairs_skipped"):
                console.print(f"  {label}: sampson_{kind} skipped {k['pairs_skipped']} of "
                              f"{k['pairs'] + k['pairs_skipped']} frame pairs {k['skip_reasons']}")
        if s.get("videos_skipped"):
            console.print(f"  {label}: {s['videos_skipped']} video(s) could not be scored (see videos.jsonl status)")
    ee = results.get("end_effector")
    if ee and ee.get("status") != "ok":
        console.print(f"  {EE_METRIC} absent: {ee['reason']}")
    elif ee:
        found = ", ".join(f"{label} {100 * m['found']:.0f} %" for label, m in ee["models"].items() if m.get("found") is not None)
        console.print(f"  {EE_METRIC}: gripper found on {found} of the scored frames (elsewhere its last position "
                      "is kept); the real clips' row is the detector's own error")
    _print_task_and_seeds(console, results)
    j = results["judge"]
    if j["status"] == "skipped":
        console.print(f"  judge skipped: {j['reason']}")
    elif j["status"] == "ran":
        for m, c in j["counts"].items():
            console.print(f"  {m}: {c['ok']} scored, {c['cached']} from cache, {c['parse_failed']} unparsable (excluded), "
                          f"{c['error']} failed, {c['skipped']} skipped")


def _print_task_and_seeds(console: Any, results: dict[str, Any]) -> None:
    """One line per model: inputs whose video does the task (k/n on the first seed, 95 % Wilson interval); and across
    inputs / across seeds."""
    ts = results.get("task_success") or {}
    if ts.get("status") == "ok":
        for label, m in ts["models"].items():
            if m["n"]:
                console.print(f"  task done {label}: {m['done']}/{m['n']} inputs [{m['ci_low']:.2f}, {m['ci_high']:.2f}]; "
                              f"where the block moves {m['moved']['done']}/{m['moved']['n']}"
                              + (f"; {m['not_judged']} not judged" if m["not_judged"] else ""))
    elif ts:
        console.print(f"  task success absent: {ts.get('reason')}")
    for label, m in (results.get("input_vs_seed") or {}).get("models", {}).items():
        if m.get("ratio") is None:
            console.print(f"  across inputs / across seeds {label}: {m.get('reason')}")
        else:
            ci = f" [{m['ci_low']:.2f}, {m['ci_high']:.2f}]" if m.get("ci_low") is not None else f" ({m['reason']})"
            console.print(f"  across inputs / across seeds {label}: {m['across_inputs']:.2f} / {m['across_seeds']:.2f} "
                          f"= {m['ratio']:.2f}{ci}")


def _num(x: float) -> str:
    """Four significant digits, no exponent for ordinary values: `23.41`, `0.8123`, `1.204`."""
    return f"{x:.4g}"


def _differences_table(title: str, diffs: dict[str, dict[str, Any]], metrics: Sequence[str],
                       notes: dict[str, dict[str, None]]):
    """Per model, per metric: mean difference, 95 % CI, win rate, n (pairs/inputs); the reasons for missing
    figures are collected in `notes` (printed once under the tables)."""
    from rich.text import Text

    t = _long_table(title, ("diff", "95 % CI", "win", "n"))
    for label, per in diffs.items():
        t.add_row(Text(label, style="bold"))
        for i, m in enumerate(metrics):
            d = per.get(m) or {}
            if d.get("ci_low") is None:
                notes.setdefault(d.get("reason") or "no data", {})[label] = None
            if d.get("mean") is None:
                cells = ["—", "", ""]
            else:
                ci = f"[{d['ci_low']:+.2g}, {d['ci_high']:+.2g}]" if d.get("ci_low") is not None else "none"
                cells = [f"{d['mean']:+.3g}", ci, f"{100 * d['win_rate']:.0f}%"]
            cells.append(f"{d.get('n_pairs', 0)}/{d.get('n_inputs', 0)}")
            t.add_row(f"  {m}", *cells, end_section=i == len(metrics) - 1)
    return t


def _long_table(title: str, columns: Sequence[str]):
    """A table of (model heading, metric) rows and right-aligned figures that are never cut short."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD)
    t.add_column("model / metric", overflow="fold")
    for col in columns:
        t.add_column(col, justify="right", no_wrap=True)
    return t
