"""A run's metrics.jsonl and progress lines: what a resumed run keeps of them, and what a log file shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worldtune.atomic import rewrite_jsonl
from worldtune.console import duration, plain


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def trim_metrics(path: Path, step: int) -> set[int]:
    """After a resume from `step`: drop rows logged past it by the interrupted run (they are recomputed); returns
    the steps whose validation the file holds."""
    if not path.is_file():
        return set()
    rows = _rows(path)
    kept = [r for r in rows if r.get("step", 0) <= step]
    if len(kept) != len(rows):
        rewrite_jsonl(path, lambda r: isinstance(r, dict) and r.get("step", 0) <= step)
    return {r["step"] for r in kept if "val_loss" in r}


def logged_validation(path: Path, step: int) -> dict[str, float]:
    """The validation losses logged at `step` (a rerun of a finished run reports them instead of validating)."""
    row = next(r for r in reversed(_rows(path)) if r.get("step") == step and "val_loss" in r)
    return {k: v for k, v in row.items() if k.startswith("val_loss")}


def progress_line(row: dict[str, Any], steps: int, per_step: float) -> str:
    """The plain progress line of a log file (no terminal, so no rich bar), `per_step` seconds a step so far."""
    return (f"step {row['step']}/{steps} loss {row['loss']:.4f} lr {row['lr']:.2e} {row['step_time']:.2f} s/step "
            f"{row['samples_per_s']:.2f} samples/s ETA {duration(per_step * (steps - row['step']))}")


def startup_notes(tc, compiled: bool) -> None:
    """What a log should say before the first step: slow compilation ahead, a schedule that never leaves warmup
    (and W&B checked first, when on)."""
    if tc.wandb:
        from worldtune.train.trackers import check_wandb

        check_wandb()
    if compiled:
        plain("train: torch.compile is on: the first steps compile the transformer blocks (minutes)")
    if tc.warmup is not None and tc.warmup >= tc.steps:
        plain(f"note: train.warmup={tc.warmup} >= train.steps={tc.steps}: the learning rate never leaves warmup "
              f"(it reaches lr x f_max only at the last step); set train.warmup below train.steps")
