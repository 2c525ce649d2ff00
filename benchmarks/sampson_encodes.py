"""The Sampson figures of one clip through several encodes, on the DROID-size scene (tests/eval/droid_scene.py).

For each x264 CRF (worldtune's own video writer): the whole-frame cross-view figure per fixed pair and for the
clip (the median over all its scored frames), whether its per-frame values fall in two groups, the dynamic figure
on the true frames and on another episode's view of the same cameras, and what the calibration check says about
a right calibration and two wrong ones (another pair's F; the rig with one camera turned 8° about the table).
Also the camera-fixed mask of a wrist looking down at the plain table (`wrist_down`), slow and fast.

    PYTHONPATH=src:. .venv/bin/python benchmarks/sampson_encodes.py --json benchmarks/results/sampson_encodes.json
    PYTHONPATH=src:. .venv/bin/python benchmarks/sampson_encodes.py --codec av1 --json benchmarks/results/sampson_encodes_av1.json

Reference mode (F estimated from the real clip, no calibration) is measured on the same encodes: per pair,
accepted or declined, the accepted estimate's distance from the true F, and that of a plain robust fit to the
clip's pooled matches before any guard (is there a right estimate to accept at all?).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np


def _round(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 3)


def _reference_pairs(views: dict, name: str, truth, with_inliers: bool = False) -> dict:
    """Per pair of a reference built from `views`: accepted or declined (and why), and how far the accepted
    estimate and the unguarded robust fit to the pooled distinct matches lie from `truth(a, b)`."""
    from tests.eval.droid_scene import distance_to_truth
    from worldtune.eval.epipolar import distinct, robust_fundamental
    from worldtune.eval.sampson import SampsonConfig, SampsonError

    metric = SampsonError(SampsonConfig(geometry="reference"))
    ref = metric.reference(views, name)
    matcher = metric.matcher(reference=True)
    feats = {r: metric.features(v, None, reference=True) for r, v in views.items()}
    out = {}
    for key, p in ref.pairs.items():
        a, b = key.split("|")
        m = [matcher.match(x, y) for x, y in zip(feats[a], feats[b])]
        x0, x1 = np.concatenate([q[0] for q in m]), np.concatenate([q[1] for q in m])
        keep = distinct(x0, x1)
        plain = robust_fundamental(x0[keep], x1[keep], metric.cfg.fit)  # the estimate before any guard
        F = truth(a, b)
        out[key] = {"accepted": p.F is not None, "reason": p.reason,
                    **({"inliers": p.inliers} if with_inliers else {}),
                    "from_truth_px": _round(distance_to_truth(p.F, F)) if p.F is not None else None,
                    "estimate_error_px": p.checks.get("estimate_error_px"),  # what the split fits imply for it
                    "unguarded_fit_from_truth_px": _round(distance_to_truth(plain[0], F)) if plain else None}
    return out


def _through(frames: np.ndarray, codec: str, crf: int, name: str) -> np.ndarray:
    """Frames through an encode and back: worldtune's own writer (x264) or SVT-AV1 as LeRobot writes."""
    from tests.eval.droid_scene import encode
    from worldtune.data.video import write_video
    from worldtune.eval.video import read_video

    if codec == "av1":
        return encode(frames, "av1", crf=crf)
    with tempfile.TemporaryDirectory() as tmp:
        return read_video(write_video(Path(tmp) / f"{name}.mp4", frames, 15, crf=crf))[0]


def box_reference_mode(crfs: list[int], codec: str, frames: int = 16) -> dict:
    """Reference mode on a static, textured rig: tests/eval/eval_scene.py's box corner (three textured planes,
    which fix F) seen by its two exterior cameras and a third, nothing moving, through the same encodes."""
    from tests.eval.eval_scene import exterior_cams, look_at, render
    from worldtune.eval.epipolar import fundamental_from_cameras

    a, b = exterior_cams()
    cams = {"e1": a, "e2": b, "e3": look_at([0.9, -0.6, 1.3], [-0.3, 1.2, 0.2])}

    def truth(x: str, y: str) -> np.ndarray:
        return fundamental_from_cameras(cams[x].K, cams[x].R, cams[x].t, cams[y].K, cams[y].R, cams[y].t)

    out: dict = {}
    for crf in crfs:
        views = {n: _through(np.stack([render(c)] * frames), codec, crf, f"box_{n}") for n, c in cams.items()}
        out[f"{codec}_crf{crf}"] = _reference_pairs(views, "box", truth)
    return out


def encode_row(views: dict, others: dict, cals: dict, K: dict, truth) -> dict:
    """What the project's functions say about one encode of a fixed rig's clip (`views`, role -> frames), with
    `others` another episode's views of the same cameras: the calibration check of each calibration (`cals`: name ->
    pair key -> F, "right" the true one; `K` per role), the whole-frame figure per pair and for the clip under the
    true calibration with its bimodality flag, the dynamic figure on the true frames and against the other episode,
    and reference mode (`truth(a, b)`: the true F of a pair)."""
    from worldtune.eval.rig import PairReference, Reference
    from worldtune.eval.sampson import SampsonError, two_groups

    roles = sorted(views)
    sizes = {r: tuple(views[r].shape[1:3]) for r in roles}
    metric = SampsonError()
    row: dict = {"calibration": {}}
    refs = {}
    for name, pairs in cals.items():
        base = Reference("ep0", sizes, set(), {k: PairReference(F, "calibrated") for k, F in pairs.items()}, K=K)
        cpu = time.process_time()
        refs[name] = metric.reference(views, "ep0", base=base)
        row.setdefault("reference_cpu_s", {})[name] = round(time.process_time() - cpu, 2)  # the whole rig reference
        row["calibration"][name] = {k: {"kept": p.F is not None, "reason": p.reason,
                                        **{c: p.checks.get(c) for c in ("matches_within_0.5px", "by_chance_within_0.5px",
                                                                        "matches_fitting_the_clip", "fitting_by_chance",
                                                                        "silhouette_median_px", "unverified",
                                                                        "real_clip_frames_scored")}}
                                    for k, p in refs[name].pairs.items() if k in pairs}
    score = metric.score_views(views, reference=refs["right"])
    clip = score.overall("crossview")
    row["crossview"] = {k: {"median_px": _round(s.median), "frames": s.evaluated, "bimodal": two_groups(s.pair_medians)}
                        for k, s in score.crossview.items()}
    row["crossview_clip"] = {"median_px": _round(clip.median), "frames": clip.evaluated,
                             "bimodal": two_groups(clip.pair_medians)}
    row["dynamic_true"] = {k: {"median_px": _round(s.median), "frames": s.evaluated}
                           for k, s in score.crossview_dynamic.items()}
    row["dynamic_other_episode"] = {}
    for key in score.crossview_dynamic:
        a, b = key.split("|")
        s = metric.score_views({a: views[a], b: others[b]}, reference=refs["right"]).crossview_dynamic[key]
        row["dynamic_other_episode"][key] = {"median_px": _round(s.median), "frames": s.evaluated}
    row["reference_mode"] = _reference_pairs(views, "ep0", truth, with_inliers=True)
    return row


def encodes(frames: int, crfs: list[int], codec: str = "x264") -> dict:
    from tests.eval.droid_scene import FIXED, DroidEpisode, encode
    from tests.eval.test_calibration_check import calibrations
    from worldtune.data.video import write_video
    from worldtune.eval.video import read_video

    ep, other = DroidEpisode(0, frames), DroidEpisode(1, frames)
    raw, raw_other = ep.views(FIXED), other.views(FIXED)
    cals = calibrations(ep)
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for crf in crfs:
            if codec == "x264":  # worldtune's own writer
                read = lambda v, name: read_video(write_video(Path(tmp) / f"{name}_{crf}.mp4", v, 15, crf=crf))[0]  # noqa: E731
            else:  # SVT-AV1, a keyframe every 2 frames, as LeRobot writes videos
                read = lambda v, name: encode(v, "av1", crf=crf)  # noqa: E731
            views = {r: read(v, r) for r, v in raw.items()}
            others = {r: read(v, f"other_{r}") for r, v in raw_other.items()}
            out[f"{codec}_crf{crf}"] = encode_row(views, others, cals, {r: ep.camera(r).K for r in FIXED},
                                                  lambda a, b: ep.F(a, b))
    return out


def wrist_masks(frames: int = 48) -> dict:
    from tests.eval.droid_scene import DroidEpisode, encode
    from worldtune.eval.rig import Reference, camera_fixed_mask
    from worldtune.eval.sampson import SampsonError

    out = {}
    for name, speed in (("slow", 0.003), ("fast", 0.012)):
        ep = DroidEpisode(0, frames, speed, wrist_down=True)
        clip = encode(np.stack([ep.render_view("wrist", i) for i in range(frames)]))  # AV1 as LeRobot writes it
        fingers = np.mean([ep.gripper_mask(i) for i in range(0, frames, 8)], axis=0) > 0.5
        usable = camera_fixed_mask(clip)
        metric = SampsonError()
        ref = metric.reference({"wrist": clip}, "w", base=Reference("w", {"wrist": clip.shape[1:3]}, {"wrist"},
                                                                    K={"wrist": ep.camera("wrist").K}))
        temporal = metric.score_views({"wrist": clip}, reference=ref).temporal["wrist"]
        out[name] = {"temporal_pairs_scored": temporal.evaluated, "temporal_pairs": temporal.evaluated + temporal.n_skipped,
                     "temporal_skips": temporal.skipped, "fingers_share": _round(fingers.mean()),
                     "masked_share": None if usable is None else _round(1 - usable.mean()),
                     "fingers_masked": None if usable is None else _round((~usable)[fingers].mean())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--crf", type=int, nargs="+", default=[18, 28, 35])
    ap.add_argument("--codec", choices=["x264", "av1"], default="x264")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.time()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
              "frames": args.frames, "codec": args.codec, "encodes": encodes(args.frames, args.crf, args.codec),
              "box_reference_mode": box_reference_mode(args.crf, args.codec), "wrist_down_mask": wrist_masks()}
    result["seconds"] = round(time.time() - t0, 1)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
