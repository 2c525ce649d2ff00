"""The process pool that runs the evaluation's CPU-heavy loops (videos scored), under the stages'
progress display (`worldtune.console.Progress`)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable


def map_processes(fn: Callable[..., Any], args: list[tuple], workers: int, title: str, progress: bool = True,
                  unit: str = "videos") -> list:
    """[fn(*a) for a in args] in `workers` spawned processes (one OpenCV thread each), in order, with progress.

    Spawned, not forked: a forked child inherits OpenCV's thread-pool locks and can deadlock; so a
    script calling this with workers > 1 needs the usual `if __name__ == "__main__":` guard.
    """
    from worldtune.console import Progress

    with Progress(title, len(args), unit, enabled=progress) as bar:
        if workers <= 1 or len(args) <= 1:
            out = []
            for a in args:
                out.append(fn(*a))
                bar.advance()
            return out
        results: dict[int, Any] = {}
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_one_opencv_thread) as pool:
            futures = {pool.submit(fn, *a): i for i, a in enumerate(args)}
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                bar.advance()
    return [results[i] for i in range(len(args))]


def _one_opencv_thread() -> None:
    """Parallelism comes from processes, not from OpenCV's threads oversubscribing the cores."""
    import cv2

    cv2.setNumThreads(1)
