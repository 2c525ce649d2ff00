"""Sampson error throughput: videos/s for temporal + cross-view on 93-frame 3-camera clips.

Each video is a 2x2 grid (three 180x320 views, DROID's size) of the hard synthetic scene
(worldtune.scene.episode, style "hard": plain table, exterior cameras >= 75° apart, a wrist camera
that sees the gripper), H.264-encoded, scored the way `worldtune evaluate` scores it: against the
rig's calibrated F for the fixed pair, with the real clip's camera-fixed masks, KLT + cross-fitted
F for the wrist over time and guarded cross-fitted F for the wrist pairs. The rig reference is
built once per input (timed apart); `--videos` generated videos per input are then scored in
`--workers` processes.

    .venv/bin/python benchmarks/sampson_bench.py --inputs 2 --videos 4 --workers 2

`--sensitivity` instead measures what a known shift of one view does to the fixed pair's value
(32 frames of the same scene, calibrated reference): every frame of exterior_2 moved by d px,
rendered exactly (principal point moved) and encoded like the clip, in three ways: across the
epipolar lines with a random sign per frame (jitter), across them constantly (a displaced view),
and in a random direction per frame.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROLES = {"exterior_1": "exterior_1_left", "exterior_2": "exterior_2_left", "wrist": "wrist_left"}
LAYOUT = {"type": "grid", "rows": 2, "cols": 2, "cells": {"exterior_1": [0, 0], "exterior_2": [0, 1], "wrist": [1, 0]}}


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the worker pool, once shut down)."""
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


def render_clip(index: int, frames: int) -> tuple[object, dict[str, np.ndarray]]:
    from worldtune.scene.episode import SyntheticEpisode

    ep = SyntheticEpisode(index, frames, 0, 180, 320, style="hard")
    return ep, {r: np.stack([ep.render_view(n, i) for i in range(frames)]) for r, n in ROLES.items()}


def grid(views: dict[str, np.ndarray]) -> np.ndarray:
    t = len(views["wrist"])
    out = np.zeros((t, 360, 640, 3), np.uint8)
    out[:, :180, :320], out[:, :180, 320:], out[:, 180:, :320] = views["exterior_1"], views["exterior_2"], views["wrist"]
    return out


def calibrated(ep, roles=ROLES, size=(180, 320)):
    """The rig reference a dataset's cameras.json gives: F of the fixed pair, K of every view."""
    from worldtune.eval.epipolar import fundamental_from_cameras
    from worldtune.eval.rig import PairReference, Reference

    c1, c2 = ep.camera("exterior_1", 0), ep.camera("exterior_2", 0)
    F = fundamental_from_cameras(c1.K, c1.R, c1.t, c2.K, c2.R, c2.t)
    return Reference(f"ep{ep.index}", {r: size for r in roles}, {"wrist"}, {"exterior_1|exterior_2": PairReference(F, "calibrated")},
                     K={r: ep.camera(r, 0).K for r in roles})


def encoded(frames: np.ndarray) -> np.ndarray:
    """Frames through an H.264 encode and back, as generated videos reach the metric."""
    import io

    import av

    from worldtune.eval.video import encode_video

    with av.open(io.BytesIO(encode_video(frames, 15))) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def sensitivity(frames: int = 32) -> dict:
    """Rise of the fixed pair's median over the true frames for a d px shift of one view."""
    from tests.eval.eval_scene import across_epipolar_lines, shifted_view
    from worldtune.eval.sampson import SampsonError
    from worldtune.scene.episode import SyntheticEpisode

    ep = SyntheticEpisode(0, frames, 0, 180, 320, style="hard")
    real = {r: encoded(np.stack([ep.render_view(n, i) for i in range(frames)])) for r, n in ROLES.items()}
    metric = SampsonError()
    ref = metric.reference(real, "ep0", base=calibrated(ep))
    pair = lambda views: metric.score_views(views, reference=ref).crossview["exterior_1|exterior_2"]  # noqa: E731
    true = pair(real)
    n = across_epipolar_lines(ref.pairs["exterior_1|exterior_2"].F, (180, 320))
    rng = np.random.default_rng(0)  # the validation test's signs
    signs = rng.choice([-1.0, 1.0], frames)[:, None]
    angles = rng.uniform(0, 2 * np.pi, frames)
    kinds = {"jitter_across_lines": signs * n, "constant_across_lines": np.ones((frames, 1)) * n,
             "jitter_random_direction": np.stack([np.cos(angles), np.sin(angles)], 1)}
    out = {"frames": frames, "true_median_px": round(true.median, 3), "true_pairs": true.evaluated}
    for kind, unit in kinds.items():
        rows = []
        for d in (1, 2, 4):
            s = pair(dict(real, exterior_2=encoded(shifted_view(ep, "exterior_2", d * unit))))
            rows.append({"d": d, "median_px": round(s.median, 3), "rise_px": round(s.median - true.median, 3),
                         "pairs": s.evaluated})
        out[kind] = rows
    return out


def droid(frames: int = 32) -> dict:
    """The figures of tests/eval/test_sampson_droid.py on the DROID-size scene (tests/eval/droid_scene.py)."""
    from tests.eval.droid_scene import FIXED, H, NARROW, W, WIDE, DroidEpisode, distance_to_truth, encode
    from tests.eval.test_sampson_droid import FAST, SLOW, _wrist_agreement, calibrated
    from worldtune.eval.sampson import SampsonConfig, SampsonError

    ep, other = DroidEpisode(0, frames, FAST), DroidEpisode(1, frames, FAST)
    raw = ep.views(FIXED)
    av1, h264 = {r: encode(v) for r, v in raw.items()}, {r: encode(v, "h264") for r, v in raw.items()}
    metric = SampsonError()
    ref = metric.reference(av1, "ep0", base=calibrated(ep, FIXED))
    out: dict = {"frames": frames, "detect_scale": ref.detect_scale,
                 "references": {k: p.summary() for k, p in ref.pairs.items()}}

    def pair(views, key=NARROW, scale="auto", kind="crossview"):
        a, b = key.split("|")
        m = metric if scale == "auto" else SampsonError(SampsonConfig(detect_scale=scale))
        s = getattr(m.score_views({a: views[a], b: views[b]}, reference=ref), kind)[key]
        return {"median_px": None if s.evaluated == 0 else round(s.median, 3), "frames_scored": s.evaluated,
                **({"skip_reasons": s.skipped, "dropped": s.dropped} if kind == "crossview_dynamic" else
                   {"fallback_frames": s.fallback})}

    for scale in ("auto", 0.5):
        out[f"narrow_scale_{scale}"] = {"av1": pair(av1, scale=scale), "h264": pair(h264, scale=scale)}
    F = ep.F("ext_a", "ext_b")
    line = F.T @ np.array([(W - 1) / 2, (H - 1) / 2, 1.0])
    n = line[:2] / np.linalg.norm(line[:2])
    signs = np.random.default_rng(0).choice([-1.0, 1.0], frames)
    shifted = {d: np.stack([ep.render_view("ext_b", i, tuple(d * signs[i] * n)) for i in range(frames)]) for d in (1, 2, 4)}
    out["narrow_jitter"] = {d: pair(dict(av1, ext_b=encode(v)))["median_px"] for d, v in shifted.items()}
    out["narrow_jitter_h264"] = {d: pair(dict(h264, ext_b=encode(v, "h264"))) for d, v in shifted.items()}
    out["narrow_other_episode"] = pair(dict(av1, ext_b=encode(other.views(("ext_b",))["ext_b"])))
    out["wide"] = pair(av1, WIDE)
    out["fallback_cost"] = fallback_cost(ep, h264, calibrated)
    # the figure on what moves (silhouette tangency): true frames, another episode's view, only the arm moved
    oth = {r: encode(v) for r, v in other.views(FIXED).items()}
    dyn = lambda views, key=NARROW: pair(views, key, kind="crossview_dynamic")  # noqa: E731
    out["dynamic"] = {"narrow_av1": dyn(av1), "narrow_h264": dyn(h264), "narrow_other_episode": dyn(dict(av1, ext_b=oth["ext_b"])),
                      "wide_av1": dyn(av1, WIDE), "wide_h264": dyn(h264, WIDE), "wide_other_episode": dyn(dict(av1, ext_c=oth["ext_c"]), WIDE)}
    signs1 = np.random.default_rng(1).choice([-1.0, 1.0], frames)  # the validation test's signs
    out["dynamic"]["narrow_arm_jitter"] = {d: dyn(dict(av1, ext_b=encode(np.stack([ep.render_view("ext_b", i, moving_shift=tuple(
        d * signs1[i] * n)) for i in range(frames)]))))["median_px"] for d in (1, 2, 4, 8)}
    out["dynamic"]["narrow_arm_jitter_whole_frame_figure"] = {d: pair(dict(av1, ext_b=encode(np.stack([ep.render_view(
        "ext_b", i, moving_shift=tuple(d * signs1[i] * n)) for i in range(frames)]))))["median_px"] for d in (4, 8)}
    for name, e in (("textured", ep), ("poster_only", DroidEpisode(0, frames, poster_only=True))):
        views = av1 if e is ep else {r: encode(v) for r, v in e.views(FIXED).items()}
        for guard, cfg in (("proven", SampsonConfig(geometry="reference")),
                           ("one_fit", SampsonConfig(geometry="reference", max_disagreement=float("inf"), min_agreement=0))):
            p = SampsonError(cfg).reference({r: views[r] for r in ("ext_a", "ext_b")}, name).pairs[NARROW]
            out[f"estimate_{name}_{guard}"] = {**p.summary(), "F": None, "px_from_truth": None if p.F is None else
                                               round(distance_to_truth(p.F, e.F("ext_a", "ext_b")), 2)}
    for speed, v in (("slow", SLOW), ("fast", FAST)):
        e = DroidEpisode(0, frames, v)
        within, scored, moving = _wrist_agreement(metric, e, encode(e.views(("wrist",))["wrist"]))
        out[f"wrist_{speed}"] = {"within_0.3px_of_truth": round(within, 3), "scored": round(scored, 3), "moving_pairs": moving}
    return out


def fallback_cost(ep, views: dict, calibrated) -> dict:
    """CPU seconds to score the 30° pair's 32 H.264 frames (whole-frame figure, full size), with and without
    the lower-contrast second detection, under the true F (20 frames ask for it) and a wrong one (all do)."""
    from tests.eval.droid_scene import FIXED, NARROW
    from worldtune.eval.sampson import SampsonConfig, SampsonError

    pair = {r: views[r] for r in NARROW.split("|")}
    out: dict = {}
    for label, contrast in (("with", 0.02), ("without", None)):
        metric = SampsonError(SampsonConfig(fallback_contrast=contrast, crossview_dynamic=False, detect_scale=1.0))
        for geometry, wrong in (("true_F", False), ("wrong_F", True)):
            ref = calibrated(ep, FIXED, wrong=wrong)
            metric.score_views(pair, reference=ref)  # OpenCV's first call pays its start-up
            t = time.process_time()
            s = metric.score_views(pair, reference=ref).crossview[NARROW]
            out[f"{label}_{geometry}"] = {"cpu_s": round(time.process_time() - t, 2), "frames_scored": s.evaluated,
                                          "fallback_frames": s.fallback}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=2, help="episodes (real clips, one reference each)")
    ap.add_argument("--videos", type=int, default=4, help="generated videos scored per input")
    ap.add_argument("--frames", type=int, default=93)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--crossview-step", type=int, default=1)
    ap.add_argument("--detect-scale", default="1.0", help="SIFT scale for cross-view matching, or auto")
    ap.add_argument("--sensitivity", action="store_true", help="measure the response to a known shift instead")
    ap.add_argument("--droid", action="store_true", help="the DROID-size validation scene's figures instead")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    if args.droid or args.sensitivity:
        text = json.dumps(droid() if args.droid else sensitivity(), indent=1, default=str)
        print(text)
        if args.json:
            args.json.write_text(text + "\n")
        return

    from rich.console import Console
    from rich.table import Table

    from tests.eval.eval_scene import sine_warp
    from worldtune.eval.sampson import SampsonConfig, SampsonError, VideoSource, summarize
    from worldtune.eval.video import write_video

    scale = args.detect_scale if args.detect_scale == "auto" else float(args.detect_scale)
    cfg = SampsonConfig(crossview_step=args.crossview_step, detect_scale=scale)
    metric = SampsonError(cfg)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        sources, refs, real_sources, bases = [], [], [], []
        for i in range(args.inputs):
            ep, views = render_clip(i, args.frames)
            real = write_video(Path(tmp) / f"real{i}.mp4", grid(views), 15)
            bases.append(calibrated(ep))
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
        t, cpu = time.time(), _cpu()
        scores = metric.score_many(sources, workers=args.workers, progress=False, references=refs)
        dt, cpu = time.time() - t, _cpu() - cpu
    s = summarize(scores)
    result = {"videos": len(sources), "workers": args.workers, "frames": args.frames, "views": "3 x 180x320",
              "detect_scale": args.detect_scale,
              "crossview_step": args.crossview_step, "score_seconds": round(dt, 2),
              "videos_per_s": round(len(sources) / dt, 3),
              # what the worker processes used, start-up included: the rate on cores no one else uses
              "cpu_seconds_per_video": round(cpu / len(sources), 2),
              "videos_per_s_free_cores": round(len(sources) / (cpu / args.workers), 3),
              "load_average_1min": round(os.getloadavg()[0], 2),
              "reference_seconds_per_input": round(t_ref / args.inputs, 2),
              "temporal_median_px": s["temporal"]["median"], "crossview_median_px": s["crossview"]["median"],
              "crossview_fallback_frames": s["crossview"].get("fallback_frames"),
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
