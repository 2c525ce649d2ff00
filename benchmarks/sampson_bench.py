"""Sampson error throughput: videos/s for temporal + cross-view on 93-frame 3-camera clips.

Each video is a 2x2 grid (three 180x320 views, DROID's size) of the hard synthetic scene
(worldtune.data.synthetic, style "hard": plain table, exterior cameras >= 75° apart, a wrist camera
that sees the gripper), H.264-encoded, scored the way `worldtune evaluate` scores it: against the
rig's calibrated F for the fixed pair, with the real clip's camera-fixed masks, KLT + cross-fitted
F for the wrist over time and guarded cross-fitted F for the wrist pairs. The rig reference is
built once per input (timed apart); `--videos` generated videos per input are then scored in
`--workers` processes.

    .venv/bin/python benchmarks/sampson_bench.py --inputs 2 --videos 4 --workers 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROLES = {"exterior_1": "exterior_1_left", "exterior_2": "exterior_2_left", "wrist": "wrist_left"}
LAYOUT = {"type": "grid", "rows": 2, "cols": 2, "cells": {"exterior_1": [0, 0], "exterior_2": [0, 1], "wrist": [1, 0]}}


def render_clip(index: int, frames: int) -> tuple[object, dict[str, np.ndarray]]:
    from worldtune.data.synthetic import SyntheticEpisode

    ep = SyntheticEpisode(index, frames, 0, 180, 320, style="hard")
    return ep, {r: np.stack([ep.render_view(n, i) for i in range(frames)]) for r, n in ROLES.items()}


def grid(views: dict[str, np.ndarray]) -> np.ndarray:
    t = len(views["wrist"])
    out = np.zeros((t, 360, 640, 3), np.uint8)
    out[:, :180, :320], out[:, :180, 320:], out[:, 180:, :320] = views["exterior_1"], views["exterior_2"], views["wrist"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=2, help="episodes (real clips, one reference each)")
    ap.add_argument("--videos", type=int, default=4, help="generated videos scored per input")
    ap.add_argument("--frames", type=int, default=93)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--crossview-step", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    from tests.eval.eval_scene import sine_warp
    from worldtune.eval.epipolar import fundamental_from_cameras
    from worldtune.eval.rig import PairReference, Reference
    from worldtune.eval.sampson import SampsonConfig, SampsonError, VideoSource, summarize
    from worldtune.eval.video import write_video

    cfg = SampsonConfig(crossview_step=args.crossview_step)
    metric = SampsonError(cfg)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        sources, refs, real_sources, bases = [], [], [], []
        for i in range(args.inputs):
            ep, views = render_clip(i, args.frames)
            real = write_video(Path(tmp) / f"real{i}.mp4", grid(views), 15)
            c1, c2 = ep.camera("exterior_1", 0), ep.camera("exterior_2", 0)
            bases.append(Reference(f"ep{i}", {r: (180, 320) for r in ROLES}, {"wrist"},
                                   {"exterior_1|exterior_2": PairReference(fundamental_from_cameras(c1.K, c1.R, c1.t, c2.K, c2.R, c2.t), "calibrated")},
                                   K={r: ep.camera(r, 0).K for r in ROLES}))
            real_sources.append(VideoSource(f"real{i}", video=str(real), layout=LAYOUT))
            for k in range(args.videos):  # "generated": the clip with a small, smooth non-rigid wobble
                wob = {r: np.stack([sine_warp(f, 0.7, period=60, phase=float(rng.uniform(0, 6.3))) for f in v]) for r, v in views.items()}
                p = write_video(Path(tmp) / f"gen{i}_{k}.mp4", grid(wob), 15)
                sources.append(VideoSource(p.name, video=str(p), layout=LAYOUT))
        Console().print(f"rendered and encoded {args.inputs} inputs x {1 + args.videos} videos in {time.time() - t0:.1f} s")

        t = time.time()
        built = metric.reference_many(real_sources, bases, workers=args.workers, progress=False)
        t_ref = time.time() - t
        for i, r in enumerate(built):
            refs += [r] * args.videos
        t = time.time()
        scores = metric.score_many(sources, workers=args.workers, progress=False, references=refs)
        dt = time.time() - t
    s = summarize(scores)
    result = {"videos": len(sources), "workers": args.workers, "frames": args.frames, "views": "3 x 180x320",
              "crossview_step": args.crossview_step, "score_seconds": round(dt, 2),
              "videos_per_s": round(len(sources) / dt, 3), "reference_seconds_per_input": round(t_ref / args.inputs, 2),
              "temporal_median_px": s["temporal"]["median"], "crossview_median_px": s["crossview"]["median"],
              "pairs": s["temporal"]["pairs"] + s["crossview"]["pairs"],
              "skipped": s["temporal"]["pairs_skipped"] + s["crossview"]["pairs_skipped"]}
    table = Table(title=f"Sampson error, {args.frames}-frame 3-camera clips (180x320 views), hard scene")
    for k in result:
        table.add_column(k, justify="right")
    table.add_row(*[f"{v:.3f}" if isinstance(v, float) else str(v) for v in result.values()])
    Console(width=200).print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
