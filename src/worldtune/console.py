"""What worldtune prints for people: rich bars on a terminal, plain lines in a log file.

Under SLURM (or any redirect) stdout is a file: a rich bar would print nothing until the end and
library bars would fill the log with carriage returns. There the stages print one flushed plain
line per `log_every` steps instead, and the libraries' own progress bars are off.
"""

from __future__ import annotations

import os
import sys


def is_terminal() -> bool:
    """True when stdout is an interactive terminal."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def quiet_libraries() -> None:
    """Keep diffusers/transformers to errors (random weights and tiny vocabularies are expected
    here), and their progress bars off when stdout is not a terminal. Called by the CLI only."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog

    dlog.set_verbosity_error()
    tlog.set_verbosity_error()
    if not is_terminal():
        dlog.disable_progress_bar()
        tlog.disable_progress_bar()
        try:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        except ImportError:  # pragma: no cover
            pass


def plain(line: str) -> None:
    """One line to stdout, flushed at once (a log file sees it while the job runs)."""
    print(line, flush=True)


def duration(seconds: float) -> str:
    """`1h02m`, `3m05s`, `42s`: short enough for a log line."""
    s = int(round(max(0.0, seconds)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def summary_table(title: str, summary: dict, float_digits: int | None = None) -> None:
    """The two-column table each command prints at its end (item, value); floats with `float_digits` digits."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("item")
    table.add_column("value")
    for k, v in summary.items():
        table.add_row(k, f"{v:.{float_digits}f}" if float_digits is not None and isinstance(v, float) else str(v))
    Console().print(table)
