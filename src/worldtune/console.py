"""What worldtune prints for people: rich bars on a terminal, plain lines in a log file.

Under SLURM (or any redirect) stdout is a file: a rich bar would print nothing until the end and
library bars would fill the log with carriage returns. There every stage prints flushed plain
lines instead (`Progress`: at least one every 30 s or 5 % of the work, with rate and ETA; training prints
its own line every `train.log_every` steps;
`setting_up`: one for each slow setup step), and the libraries' own progress bars are off.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator


def is_terminal() -> bool:
    """True when stdout is an interactive terminal."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def quiet_libraries() -> None:
    """Keep diffusers/transformers to errors (random weights and tiny vocabularies are expected
    here), and their progress bars off: each stage draws its own (`Progress`), and a second bar
    underneath it would only interleave. Called by the CLI only."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # torchao (the fp8 extra), imported by diffusers when installed, registers two enums the way torch 2.12+ calls
    # deprecated: two warnings on every command that mean nothing to a user
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog

    dlog.set_verbosity_error()
    tlog.set_verbosity_error()
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


def rate(per_second: float, unit: str) -> str:
    """`4.1 clips/s` for fast work, `12.3 s/clip` for slow (a rate below 1/s reads badly as a fraction)."""
    if per_second <= 0:
        return "-"
    if per_second >= 1:
        return f"{per_second:.1f} {unit}/s"
    return f"{1 / per_second:.1f} s/{_singular(unit)}"


def _singular(unit: str) -> str:
    if unit.endswith(("ches", "shes", "sses")):
        return unit[:-2]
    return unit[:-1] if unit.endswith("s") and len(unit) > 1 else unit


class Progress:
    """The progress of one stage's long loop: a rich bar on a terminal; elsewhere plain lines.

    Off a terminal a line is printed when the work starts, whenever `every_s` seconds or `every_frac`
    of the total have passed since the last line, and when it ends: `generate: 12/100 videos (12%),
    41.0 s/video, ETA 1h00m - base: ep3 s0`. One item can take longer than `every_s` (a video of a
    14 B model), so a background thread prints the same line (`item 13 running 45s`) when nothing
    was printed for `every_s`: a log under SLURM never goes silent for long.

    `clock` and `heartbeat=False` let tests drive it without sleeping (call `poll()` by hand).
    Use as a context manager; `advance()` after each item, `info()` for the current item, `note()`
    for a message (above the bar on a terminal).
    """

    def __init__(self, stage: str, total: int | None, unit: str = "items", *, enabled: bool = True,
                 terminal: bool | None = None, completed: int = 0, every_s: float = 30.0, every_frac: float = 0.05,
                 heartbeat: bool = True, clock: Callable[[], float] = time.monotonic,
                 out: Callable[[str], None] = plain) -> None:
        self.stage, self.total, self.unit, self.enabled = stage, total, unit, enabled
        self.terminal = is_terminal() if terminal is None else terminal
        self.done = self._start_done = completed
        self.every_s, self.every_frac, self.heartbeat = every_s, every_frac, heartbeat
        self.clock, self.out = clock, out
        self._info = ""
        self._bar: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the context
    def __enter__(self) -> "Progress":
        self._t0 = self._last_t = self._item_t = self.clock()
        self._last_done = self.done
        if not self.enabled:
            return self
        if self.terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn(f"[bold]{self.stage}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn(self.unit), TimeElapsedColumn(), TimeRemainingColumn(),
                                     TextColumn("{task.fields[info]}"), transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.stage, total=self.total, completed=self.done, info="")
        else:
            self._line()
            if self.heartbeat:
                self._thread = threading.Thread(target=self._beat, daemon=True, name=f"progress-{self.stage}")
                self._thread.start()
        return self

    def __exit__(self, exc_type, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.__exit__(exc_type, *exc)
            return
        spent, n = self.clock() - self._t0, self.done - self._start_done
        how = f"{self._count()} {self.unit} in {duration(spent)}" + (f", {rate(n / spent, self.unit)}" if n and spent
                                                                     else "")
        self.out(f"{self.stage}: {'stopped at ' if exc_type else 'done, '}{how}")

    # ------------------------------------------------------------------ what loops call
    def advance(self, n: int = 1) -> None:
        """`n` more items done: a line off a terminal when `every_s` or `every_frac` has passed."""
        with self._lock:
            self.done += n
            self._item_t = self.clock()
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done)
            elif self.enabled and self._due():
                self._line()

    def info(self, text: str) -> None:
        """What is being worked on now (shown after the counts)."""
        self._info = text
        if self._bar is not None:
            self._bar.update(self._task, info=text)

    def note(self, text: str) -> None:
        """A message for the user (a skipped input, a warning), printed above the bar on a terminal."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            self.out(text)

    def poll(self) -> None:
        """Print a line if nothing was printed for `every_s` (the heartbeat thread calls this)."""
        with self._lock:
            if self.enabled and self._bar is None and self.clock() - self._last_t >= self.every_s:
                self._line(running=True)

    # ------------------------------------------------------------------ lines
    def _due(self) -> bool:
        if self.total and self.done >= self.total:
            return False  # the closing line says it
        if self.clock() - self._last_t >= self.every_s:
            return True
        return bool(self.total) and (self.done - self._last_done) >= max(1.0, self.every_frac * self.total)

    def _count(self) -> str:
        if not self.total:
            return str(self.done)
        return f"{self.done}/{self.total}"

    def _line(self, running: bool = False) -> None:
        now = self.clock()
        spent, n = now - self._t0, self.done - self._start_done
        parts = [f"{self.stage}: {self._count()} {self.unit}"
                 + (f" ({self.done / self.total:.0%})" if self.total else "")]
        if n and spent > 0:
            per_s = n / spent
            parts.append(rate(per_s, self.unit))
            if self.total:
                parts.append(f"ETA {duration((self.total - self.done) / per_s)}")
        parts.append(f"elapsed {duration(spent)}")
        if running and (self.total is None or self.done < self.total):
            parts.append(f"item {self.done + 1} running {duration(now - self._item_t)}")
        line = ", ".join(parts) + (f" - {self._info}" if self._info else "")
        self._last_t, self._last_done = now, self.done
        self.out(line)

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s)):
            self.poll()


@contextmanager
def setting_up(stage: str, what: str, enabled: bool = True, clock: Callable[[], float] = time.monotonic,
               out: Callable[[str], None] = plain) -> Iterator[None]:
    """A slow setup step (loading a model, a cache, compiling): a line as it starts, so a log shows
    what a silent minute is spent on, and one with its duration as it ends if that took a second or more."""
    if not enabled:
        yield
        return
    out(f"{stage}: {what}")
    t0 = clock()
    yield
    if clock() - t0 >= 1.0:
        out(f"{stage}: {what}: {clock() - t0:.1f}s")


def summary_table(title: str, summary: dict) -> None:
    """The two-column table each command prints at its end (item, value)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("item")
    table.add_column("value")
    for k, v in summary.items():
        table.add_row(k, summary_value(k, v))
    Console().print(table)


def summary_value(key: str, value: object) -> str:
    """A summary cell: seconds as `587.7 (9m48s)`, other floats to 4 significant digits (a loss `0.1234`, a
    learning rate `4.316e-05`), the rest as it prints."""
    if isinstance(value, float) and (key == "seconds" or key.endswith("_seconds")):
        return f"{value:.1f} ({duration(value)})"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
