"""One progress bar for the evaluation's long loops (videos scored, judged, published), and the
process pool that runs the CPU-heavy ones."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable


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


def map_processes(fn: Callable[..., Any], args: list[tuple], workers: int, title: str, progress: bool = True) -> list:
    """[fn(*a) for a in args] in `workers` spawned processes (one OpenCV thread each), in order, with a bar.

    Spawned, not forked: a forked child inherits OpenCV's thread-pool locks and can deadlock; so a
    script calling this with workers > 1 needs the usual `if __name__ == "__main__":` guard.
    """
    with progress_bar(len(args), title, enabled=progress) as advance:
        if workers <= 1 or len(args) <= 1:
            out = []
            for a in args:
                out.append(fn(*a))
                advance()
            return out
        results: dict[int, Any] = {}
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_one_opencv_thread) as pool:
            futures = {pool.submit(fn, *a): i for i, a in enumerate(args)}
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                advance()
    return [results[i] for i in range(len(args))]


def _one_opencv_thread() -> None:
    """Parallelism comes from processes, not from OpenCV's threads oversubscribing the cores."""
    import cv2

    cv2.setNumThreads(1)
