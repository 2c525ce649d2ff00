"""One progress bar for the evaluation's long loops (videos scored, judged, published)."""

from __future__ import annotations

from typing import Any


class progress_bar:
    """A rich progress bar as a context manager yielding an `advance()` callable."""

    def __init__(self, total: int, description: str, enabled: bool = True) -> None:
        self.total, self.description, self.enabled = total, description, enabled

    def __enter__(self):
        if not self.enabled:
            return lambda: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
        self._p.__enter__()
        task = self._p.add_task(self.description, total=self.total)
        return lambda: self._p.advance(task)

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self._p.__exit__(*exc)
