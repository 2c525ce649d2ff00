"""How a report writes a model and its figures, the same in every section: the model's name in tables, its colour
in plots, a mean ± std and a paired difference.

A module of its own so that the page (worldtune.eval.report) and the sections it takes from
worldtune.eval.report_behaviour write them alike without importing each other.
"""

from __future__ import annotations

from typing import Any, Sequence

from worldtune.eval.scores import is_reference
from worldtune.eval.stats import MIN_CI_INPUTS

REFERENCE_COLOUR = "#999999"


def model_colours(labels: Sequence[str]) -> dict[str, str]:
    """One colour per model, the same in every plot of a report (matplotlib's tab10 cycle, then tab20),
    the real clips grey; `labels` in the results' order, so the base model always gets the first colour."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    # tab10 without its grey (the real clips' colour), then tab20's light shades
    cycle = [colormaps["tab10"](i) for i in range(10) if i != 7] + [colormaps["tab20"](i) for i in range(1, 20, 2)]
    out, i = {}, 0
    for label in labels:
        if is_reference(label):
            out[label] = REFERENCE_COLOUR
        elif label not in out:
            out[label] = to_hex(cycle[i % len(cycle)])
            i += 1
    return out


def display_name(label: str, s: dict[str, Any]) -> str:
    """A model's name in tables: its label; a baseline's words and label; the real clips marked as reference.
    `s` is the model's results.json entry or one of its video rows."""
    if s.get("reference"):
        return f"{label} (reference)"
    if s.get("baseline"):
        return f"{s.get('description') or label} — baseline {label}"
    return label


def _fmt(stat: dict[str, Any] | None, digits: int = 2) -> str:
    if not stat or stat.get("mean") is None:
        return "—"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f} (n={stat['n']})"


def delta_text(d: dict[str, Any]) -> str:
    """'+0.12 [−0.05, +0.30] win 63 %, n = 8 pairs / 4 inputs'; without an interval the reason in short
    ('(no CI: 2 inputs < 5)'); '— (reason)' when there is no difference at all."""
    if d.get("mean") is None:
        return f"— ({d.get('reason') or 'no data'})"
    n = d.get("n_inputs", 0)
    ci = (f" [{d['ci_low']:+.3g}, {d['ci_high']:+.3g}]" if d.get("ci_low") is not None
          else f" (no CI: {n} input{'s' if n != 1 else ''} < {MIN_CI_INPUTS})")
    win = f" win {100 * d['win_rate']:.0f} %" if d.get("win_rate") is not None else ""
    return f"{d['mean']:+.3g}{ci}{win}, n = {d['n_pairs']} pairs / {n} inputs"
