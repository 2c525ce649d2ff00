"""Calibration check, reference mode and the dynamic figure on the project's own scene with wide baselines.

The DROID-size figures of docs/benchmarks.md were tuned on tests/eval/droid_scene.py. This script renders
another scene: worldtune.scene's demo tabletop (`SyntheticEpisode`, style "hard": a plain table and wall) at
180x320, with its first exterior camera where the scene puts it and two more placed around the table at
~30° and ~78° from it (the same height and distance), so the three fixed pairs are 30°, 78° and 48° apart.
Three settings, each a rig held for every episode:

- `hard_av1`: the scene's textures (seed 0), SVT-AV1 CRF 30 with a keyframe every 2 frames (as LeRobot writes);
- `tex5_low_x264`: other textures (`texture_seed` 5), every camera 12 cm lower, worldtune's own x264 writer at CRF 23;
- `plain_wall_av1`: as `hard_av1` with the wall's posters painted over (a faint plain wall): across the wide
  pairs SIFT finds few or no correct matches, as on a robot lab's footage.

Per setting and pair: what the calibration check says about the true calibration and two wrong ones (the
camera turned 8° about the table; another pair's F), whether reference mode (F estimated from the real clip)
accepts, and how far its estimate lies from the truth; the dynamic cross-view figure on the true frames and on
the same cameras' view of another episode of the same task (another layout and path of the red block), and
with the arm of one view moved 1, 2 or 4 cm sideways or up (`dynamic_arm_moved`).

    PYTHONPATH=src:. .venv/bin/python benchmarks/sampson_trust.py --json benchmarks/results/sampson_trust.json

`--encodes` adds (`--encodes-only`: only) the whole-frame figure of each setting's clip and of the DROID-size scene
(tests/eval/droid_scene.py) through x264 and AV1 at CRF 18, 28 and 35 under the true calibration, per pair and for
the clip, with its bimodality flag; and the same clip with one camera turned 2° and 4° further about the table (a
wrong view, which must read worse).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from tests.eval.project_rig import H, ROLES, SETTINGS, W, calibrations, episode_views, through


def _round(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 3)


def measure(setting_name: str, frames: int) -> dict:
    from tests.eval.droid_scene import distance_to_truth
    from worldtune.eval.rig import PairReference, Reference
    from worldtune.eval.sampson import SampsonConfig, SampsonError

    setting = SETTINGS[setting_name]
    t0 = time.time()
    raw, cams = episode_views(0, frames, setting)
    raw_other, _ = episode_views(1, frames, setting)
    render_s = time.time() - t0
    with tempfile.TemporaryDirectory() as tmp:
        views = {r: through(v, setting["codec"], setting["crf"], Path(tmp), r) for r, v in raw.items()}
        others = {r: through(v, setting["codec"], setting["crf"], Path(tmp), "o" + r) for r, v in raw_other.items()}
    metric = SampsonError()
    cals = calibrations(cams, setting)
    out: dict = {"setting": setting, "render_s": round(render_s, 1), "calibration": {}, "reference_mode": {},
                 "crossview": {}, "dynamic_true": {}, "dynamic_other_episode": {}}
    refs = {}
    for name, pairs in cals.items():
        base = Reference("ep0", {r: (H, W) for r in ROLES}, set(),
                         {k: PairReference(F, "calibrated") for k, F in pairs.items()}, K={r: cams[r].K for r in ROLES})
        refs[name] = metric.reference(views, "ep0", base=base)
        out["calibration"][name] = {k: {"kept": p.F is not None, "unverified": bool(p.checks.get("unverified")),
                                        "reason": p.reason or p.checks.get("unverified"),
                                        **{c: p.checks.get(c) for c in ("clip_matches", "matches_within_0.5px",
                                                                        "by_chance_within_0.5px", "matches_fitting_the_clip",
                                                                        "fitting_by_chance", "silhouette_median_px",
                                                                        "real_clip_frames_scored")}}
                                    for k, p in refs[name].pairs.items()}
    ref_mode = SampsonError(SampsonConfig(geometry="reference")).reference(views, "ep0")
    for k, p in ref_mode.pairs.items():
        out["reference_mode"][k] = {"accepted": p.F is not None, "reason": p.reason,
                                    "from_truth_px": _round(distance_to_truth(p.F, cals["right"][k])) if p.F is not None else None,
                                    "checks": {c: v for c, v in p.checks.items() if isinstance(v, (int, float, str)) or v is None}}
    score = metric.score_views(views, reference=refs["right"])
    for k, s in score.crossview.items():
        out["crossview"][k] = {"median_px": _round(s.median), "frames": s.evaluated, "skips": s.skipped}
    for k, s in score.crossview_dynamic.items():
        out["dynamic_true"][k] = {"median_px": _round(s.median), "frames": s.evaluated, "skips": s.skipped}
        a, b = k.split("|")
        o = metric.score_views({a: views[a], b: others[b]}, reference=refs["right"]).crossview_dynamic[k]
        out["dynamic_other_episode"][k] = {"median_px": _round(o.median), "frames": o.evaluated, "skips": o.skipped}
    out["dynamic_arm_moved"] = arm_moved(setting, frames, views, refs["right"])
    return out


SHIFTS_CM = (1.0, 2.0, 4.0)  # the arm moved this far in one view: sideways (world x) or up (world z)


def arm_moved(setting: dict, frames: int, views: dict, reference) -> dict:
    """The dynamic figure per pair when the second view shows the arm (and what it carries) moved by a few cm
    sideways or up, the first view true: how far above its floor a misplaced arm reads, and in which direction."""
    from worldtune.eval.sampson import SampsonError

    metric = SampsonError()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for axis, unit in (("sideways", np.array([0.01, 0.0, 0.0])), ("up", np.array([0.0, 0.0, 0.01]))):
            for cm in SHIFTS_CM:
                moved, _ = episode_views(0, frames, setting, offset=unit * cm)
                moved = {r: through(v, setting["codec"], setting["crf"], Path(tmp), f"m{r}") for r, v in moved.items()}
                for key in ("ext_0|ext_30", "ext_0|ext_78", "ext_30|ext_78"):
                    a, b = key.split("|")
                    s = metric.score_views({a: views[a], b: moved[b]}, reference=reference).crossview_dynamic[key]
                    out.setdefault(key, {})[f"{axis}_{cm:g}cm"] = _round(s.median)
    return out


TURNS = (2.0, 4.0)  # wrong views: one camera turned this many degrees further about the table


def _scene(setting_name: str, frames: int) -> tuple[dict, dict, dict, dict]:
    """(true views, true F per pair, K per role, {degrees: the views with one camera turned}) of the project rig's
    setting or of the DROID-size scene (`droid`, tests/eval/droid_scene.py: its 30° and 78° pairs, ext_b turned)."""
    if setting_name == "droid":
        from tests.eval.droid_scene import FIXED, DroidEpisode

        ep = DroidEpisode(0, frames)
        pairs = {k: ep.F(*k.split("|")) for k in ("ext_a|ext_b", "ext_a|ext_c")}
        turned = {deg: {"ext_b": _droid_turned(frames, "ext_b", deg)} for deg in TURNS}
        return ep.views(FIXED), pairs, {r: ep.camera(r).K for r in FIXED}, turned
    setting = SETTINGS[setting_name]
    raw, cams = episode_views(0, frames, setting)
    turned = {deg: {"ext_30": episode_views(0, frames, setting, turn={"ext_30": deg})[0]["ext_30"]} for deg in TURNS}
    return raw, calibrations(cams, setting)["right"], {r: cams[r].K for r in ROLES}, turned


def _droid_turned(frames: int, role: str, degrees: float) -> np.ndarray:
    """Episode 0's view of `role` on the DROID-size scene, its camera turned `degrees` further about the table."""
    import math

    from tests.eval.droid_scene import RIG, TARGET, DroidEpisode
    from worldtune.scene.raycast import Camera, look_at

    ep = DroidEpisode(0, frames)
    az, el, dist = math.radians(RIG[role][0] + degrees), math.radians(RIG[role][1]), RIG[role][2]
    eye = TARGET + dist * np.array([math.sin(az) * math.cos(el), -math.cos(az) * math.cos(el), math.sin(el)])
    cam = Camera(ep.K_ext, *look_at(eye, TARGET), ep.width, ep.height)

    def camera(r: str, i: int = 0) -> Camera:
        return cam if r == role else DroidEpisode.camera(ep, r, i)

    ep.camera = camera  # type: ignore[method-assign]
    return np.stack([ep.render_view(role, i) for i in range(frames)])


def whole_frame_encodes(setting_name: str, frames: int, crfs: tuple[int, ...] = (18, 28, 35)) -> dict:
    """The whole-frame cross-view figure of the clip (median over all its scored frames, the video's value), per pair,
    and whether its per-frame values fall in two groups, through x264 and AV1 at each CRF, under the true calibration;
    and the same for the clip with one camera turned 2° and 4° about the table (a wrong view: it must read worse)."""
    from worldtune.eval.rig import PairReference, Reference
    from worldtune.eval.sampson import SampsonError, two_groups

    raw, pairs, K, turned = _scene(setting_name, frames)
    roles = sorted(raw)
    metric = SampsonError()
    out: dict = {}

    def figures(score) -> dict:
        clip = score.overall("crossview")
        return {"median_px": _round(clip.median), "frames": clip.evaluated, "skips": clip.skipped,
                "bimodal": two_groups(clip.pair_medians),
                "pairs": {k: {"median_px": _round(s.median), "frames": s.evaluated} for k, s in score.crossview.items()}}

    with tempfile.TemporaryDirectory() as tmp:
        for codec in ("x264", "av1"):
            for crf in crfs:
                views = {r: through(v, codec, crf, Path(tmp), f"{r}{crf}") for r, v in raw.items()}
                h, w = views[roles[0]].shape[1:3]
                base = Reference("ep0", {r: (h, w) for r in roles}, set(),
                                 {k: PairReference(F, "calibrated") for k, F in pairs.items()}, K=K)
                ref = metric.reference(views, "ep0", base=base)
                row = {"true": figures(metric.score_views(views, reference=ref))}
                for deg, wrong in turned.items():
                    moved = {**views, **{r: through(v, codec, crf, Path(tmp), f"t{r}{crf}") for r, v in wrong.items()}}
                    row[f"turned_{deg:g}deg"] = figures(metric.score_views(moved, reference=ref))
                out[f"{codec}_crf{crf}"] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--encodes", action="store_true", help="also the whole-frame figure through x264 and AV1 at CRF 18/28/35, "
                    "true and with one camera turned 2° and 4°, on each setting and on the DROID-size scene")
    ap.add_argument("--encodes-only", action="store_true", help="only that")
    args = ap.parse_args()
    t0 = time.time()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
              "frames": args.frames}
    if not args.encodes_only:
        result["settings"] = {s: measure(s, args.frames) for s in args.settings}
    if args.encodes or args.encodes_only:
        result["whole_frame_encodes"] = {s: whole_frame_encodes(s, args.frames) for s in [*args.settings, "droid"]}
    result["seconds"] = round(time.time() - t0, 1)
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
