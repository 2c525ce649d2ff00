"""Sampson error throughput: videos/s for temporal + cross-view on 93-frame 2x2 grids at 432x768.

Each video is a 2x2 grid (three 216x384 views: two fixed exterior cameras and a moving one) of
a textured scene rendered with exact pinhole geometry (tests/eval/eval_scene.py). Scoring one
video = SIFT on 3 x 93 frames, 3 x 92 temporal pairs (F per pair), 3 view pairs x 93 frames
cross-view (one pooled F for the exterior pair, F per frame with the moving view).

    .venv/bin/python benchmarks/sampson_bench.py --videos 4 --workers 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_grid_video(path: Path, frames: int, seed: int) -> Path:
    from tests.eval.eval_scene import exterior_cams, look_at, render, sine_warp

    from worldtune.eval.video import write_video

    h, w = 216, 384
    a, b = exterior_cams()
    a = look_at(-a.R.T @ a.t, [-0.2, 1.2, 0.3], w, h, focal=300)
    b = look_at(-b.R.T @ b.t, [0.0, 1.3, 0.4], w, h, focal=300)
    ext1, ext2 = render(a, w, h), render(b, w, h)
    rng = np.random.default_rng(seed)
    out = np.zeros((frames, 2 * h, 2 * w, 3), np.uint8)
    for t in range(frames):
        cam = look_at([0.3 - 0.004 * t, -0.8 + 0.003 * t, 1.0], [-0.3 + 0.003 * t, 1.5, 0.4], w, h, focal=300)
        wobble = lambda im: sine_warp(im, 0.7, period=60, phase=float(rng.uniform(0, 6.3)))  # noqa: E731
        out[t, :h, :w], out[t, :h, w:], out[t, h:, :w] = wobble(ext1), wobble(ext2), wobble(render(cam, w, h))
    return write_video(path, out, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--videos", type=int, default=4)
    ap.add_argument("--frames", type=int, default=93)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    import cv2
    from rich.console import Console
    from rich.table import Table

    from worldtune.eval.sampson import SampsonConfig, SampsonError, VideoSource, summarize

    layout = {"type": "grid", "rows": 2, "cols": 2, "cells": {"exterior_1": [0, 0], "exterior_2": [0, 1], "wrist": [1, 0]}}
    table = Table(title=f"Sampson error, {args.frames}-frame 2x2 grid 432x768, {args.videos} videos")
    for col in ("metric", "workers", "seconds", "videos/s", "s/video", "median px", "pairs", "skipped"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        paths = [make_grid_video(Path(tmp) / f"v{i}.mp4", args.frames, i) for i in range(args.videos)]
        Console().print(f"rendered {len(paths)} videos in {time.time() - t0:.1f} s")
        sources = [VideoSource(p.name, video=str(p), layout=layout) for p in paths]
        for name, kw in (("temporal", {"crossview": False}), ("cross-view", {"temporal": False}), ("both", {})):
            metric = SampsonError(SampsonConfig(**kw))
            if args.workers <= 1:
                cv2.setNumThreads(1)
            t = time.time()
            scores = metric.score_many(sources, workers=args.workers, progress=False)
            dt = time.time() - t
            s = summarize(scores)
            kind = "temporal" if name == "temporal" else "crossview" if name == "cross-view" else None
            med = s[kind]["median"] if kind else s["temporal"]["median"]
            pairs = s[kind]["pairs"] if kind else s["temporal"]["pairs"] + s["crossview"]["pairs"]
            skipped = s[kind]["pairs_skipped"] if kind else s["temporal"]["pairs_skipped"] + s["crossview"]["pairs_skipped"]
            table.add_row(name, str(args.workers), f"{dt:.1f}", f"{len(paths) / dt:.3f}", f"{dt / len(paths):.1f}",
                          f"{med:.3f}" if med is not None else "-", str(pairs), str(skipped))
    Console(width=130).print(table)


if __name__ == "__main__":
    main()
