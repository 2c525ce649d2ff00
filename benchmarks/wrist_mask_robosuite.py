"""The camera-fixed mask of robosuite's Lift wrist view ("robot0_eye_in_hand"), against the true gripper pixels.

Footage from another renderer than the project's own scenes: robosuite (MuJoCo, OpenGL through EGL) renders
the Panda arm picking up the cube under a scripted OSC_POSE controller (above the cube, down, close, lift;
the fast variant then carries the cube aside and sets it down), slow and fast, several seeds, 180x320 at
20 fps, flipped upright as LeRobot's conversion scripts do. Each episode is written as SVT-AV1 (CRF 30, a
keyframe every 2 frames, yuv420p: as LeRobot writes) and x264 (CRF 30, yuv420p) MP4s, with its raw frames
and the true gripper mask of every frame (MuJoCo's segmentation render: the geoms of the gripper's bodies).

The analysis decodes each MP4 with worldtune's reader, takes frames 0-184 step 2 (the slow episodes run on
until the lift ends, 212-237 frames) and calls `camera_fixed_mask` as the Sampson reference does (the view's
frames, default arguments). Per video: the fraction of the view masked, the gripper's share of the view,
the mask's recall (of the pixels the gripper covers in at least half of the frames, of its outline and of
its fingers, the share masked) and precision (of the masked pixels, the share the gripper covers in any
frame; see `truths`). The same for the raw frames, and with `camera_fixed_mask` as it was earlier, read
from git history (EARLIER: before the plain-table fix, and with it) and, with --also-commit, at other commits.

Two commands, the second from the project's venv:

    MUJOCO_GL=egl ROBOSUITE_ENV/bin/python benchmarks/wrist_mask_robosuite.py --render DIR
    .venv/bin/python benchmarks/wrist_mask_robosuite.py --videos DIR

The render venv needs robosuite 1.5 and mujoco 3 (`pip install robosuite==1.5.1 "mujoco>=3.2,<3.4" av`).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
H, W = 180, 320
FPS = 20
FRAMES = 185  # the analysis reads frames 0-184 step 2
SAMPLE = slice(0, 185, 2)
CAMERA = "robot0_eye_in_hand"
EARLIER = {"percentile_only": "e800e03^",  # textured: the 40 % of pixels with the strongest gradient
           "gradient_floor": "e800e03"}  # ... and a time-averaged gradient of at least 6 (the plain-table fix)
OSC_SCALE = 0.05  # m of position delta per unit of OSC_POSE action (the scripts' gain)
PARTS = {"hand": 1, "finger": 2, "cube": 3}  # the label image: 0 anything else
CODECS = {"av1": ("libsvtav1", {"crf": "30", "g": "2", "preset": "10"}),
          "h264": ("libx264", {"crf": "30", "preset": "medium"})}


# -- rendering (robosuite venv) -------------------------------------------------------------------------------

def _script(env, carry: bool, rng: np.random.Generator):
    """Waypoints (target eef position, gripper command, frames to hold after reaching it) of a pick-and-lift."""
    cube = env.sim.data.body_xpos[env.cube_body_id].copy()
    way = [(cube + [0, 0, 0.10], -1.0, 0), (cube + [0, 0, -0.005], -1.0, 0), (cube + [0, 0, -0.005], 1.0, 12),
           (cube + [0, 0, 0.20], 1.0, 0)]
    if carry:  # the fast demonstration carries the cube aside and sets it down, then rises
        aside = cube + [rng.uniform(-0.12, 0.12), rng.uniform(-0.15, 0.15), 0.0]
        way += [(aside + [0, 0, 0.20], 1.0, 0), (aside + [0, 0, 0.01], 1.0, 0), (aside + [0, 0, 0.01], -1.0, 10),
                (aside + [0, 0, 0.18], -1.0, 0)]
    return way


def osc_action(action_dim: int, pos: np.ndarray, target: np.ndarray, grip: float, speed: float) -> np.ndarray:
    """OSC_POSE's action that moves the gripper towards `target` by at most `speed` m, with gripper command `grip`
    (OSC_POSE maps a position action of 1 to OSC_SCALE m)."""
    d = target - pos
    step = d * min(1.0, speed / max(np.linalg.norm(d), 1e-9))
    action = np.zeros(action_dim)
    action[:3] = np.clip(step * 2.0 / OSC_SCALE, -1, 1)
    action[-1] = grip
    return action


def render_episode(seed: int, speed: float, carry: bool) -> dict:
    """One Lift episode under the scripted controller: frames (T, H, W, 3) uint8 upright, labels (T, H, W) (PARTS)."""
    import robosuite as suite
    from robosuite.controllers import load_composite_controller_config

    np.random.seed(seed)  # robosuite's placement sampler draws from numpy's global generator
    rng = np.random.default_rng(seed)
    cfg = load_composite_controller_config(controller="BASIC", robot="Panda")  # the arm under OSC_POSE
    env = suite.make("Lift", robots="Panda", controller_configs=cfg, has_renderer=False, has_offscreen_renderer=True,
                     use_camera_obs=False, control_freq=FPS, horizon=10_000, ignore_done=True)
    env.reset()
    m = env.sim.model
    bodies = [m.body_id2name(m.geom_bodyid[g]) for g in range(m.ngeom)]
    part = np.array([PARTS["finger"] if b.startswith("gripper0") and "finger" in b else
                     PARTS["hand"] if b.startswith(("gripper0", "robot0")) else
                     PARTS["cube"] if b.startswith("cube") else 0 for b in bodies], np.uint8)
    way = _script(env, carry, rng)
    frames, masks, eef, w, held = [], [], [], 0, 0
    while len(frames) < FRAMES or w < len(way):
        img = env.sim.render(camera_name=CAMERA, height=H, width=W)
        seg = env.sim.render(camera_name=CAMERA, height=H, width=W, segmentation=True)
        frames.append(np.ascontiguousarray(img[::-1]))  # robosuite renders upside down
        geom = (seg[..., 0] == 5) & (seg[..., 1] >= 0)  # objtype 5: a geom
        masks.append(np.where(geom, part[np.clip(seg[..., 1], 0, m.ngeom - 1)], 0)[::-1])
        pos = env.sim.data.site_xpos[env.robots[0].eef_site_id["right"]].copy()
        eef.append(pos.tolist())
        target, grip, hold = way[min(w, len(way) - 1)]
        env.step(osc_action(env.action_dim, pos, target, grip, speed))
        if w < len(way) and np.linalg.norm(target - pos) < 0.01:
            held += 1
            if held > hold:
                w, held = w + 1, 0
        if len(frames) > 600:
            break
    env.close()
    return {"frames": np.stack(frames), "labels": np.stack(masks), "eef": np.array(eef)}


def write_mp4(path: Path, frames: np.ndarray, encoder: str, options: dict[str, str], fps: int = FPS) -> None:
    """Frames (T, H, W, 3) uint8 through `encoder` (libx264, libsvtav1) with its `options`, yuv420p."""
    import av

    os.environ.setdefault("SVT_LOG", "1")
    with av.open(str(path), "w") as out:
        s = out.add_stream(encoder, rate=Fraction(fps))
        s.width, s.height, s.pix_fmt, s.options = frames.shape[2], frames.shape[1], "yuv420p", options
        for f in frames:
            out.mux(s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")))
        out.mux(s.encode())


def render(out: Path, seeds: list[int], speeds: dict[str, float]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for kind, speed in speeds.items():
            t = time.time()
            ep = render_episode(seed, speed, carry=kind == "fast")
            name = f"lift_s{seed}_{kind}"
            np.savez_compressed(out / f"{name}.npz", frames=ep["frames"], labels=ep["labels"], eef=ep["eef"],
                                speed=speed)
            for codec in CODECS:
                write_mp4(out / f"{name}_{codec}.mp4", ep["frames"], *CODECS[codec])
            print(f"{name}: {len(ep['frames'])} frames, gripper {np.isin(ep['labels'], (1, 2)).mean():.3f} of the view, "
                  f"eef travel {np.linalg.norm(np.diff(ep['eef'], axis=0), axis=1).sum():.2f} m, {time.time() - t:.0f} s",
                  flush=True)


# -- analysis (project venv) ----------------------------------------------------------------------------------

def function_at(commit: str, name: str = "camera_fixed_mask", path: str = "src/worldtune/eval/rig.py"):
    """`name` as it was at `commit` (its source from git history, with the module constants it reads)."""
    src = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    tree = ast.parse(src)
    keep = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name == name) or
            (isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(getattr(n, "value", None), ast.Constant))]
    ns: dict = {"np": np, "__name__": f"rig_{commit}"}
    exec(compile(ast.Module(body=keep, type_ignores=[]), f"{commit}:{path}", "exec"), ns)
    return ns[name]


def truths(labels: np.ndarray) -> dict[str, np.ndarray]:
    """The true pixel sets of the sampled frames' labels (T, H, W).

    gripper: covered by the gripper (hand or fingers) in at least half of the frames; fingers: the fingers
    alone, likewise; outline: gripper pixels within 4 px of where it meets the scene (its edges: where
    features would be found on it; its plain inside gives none and may stay usable); anywhere: covered
    by the gripper in any frame; cube: covered by the cube in any frame (held, it rides with the camera).
    """
    import cv2

    grip = np.isin(labels, (PARTS["hand"], PARTS["finger"]))
    gripper = grip.mean(0) >= 0.5
    scene = cv2.dilate((~gripper).astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
    return {"gripper": gripper, "fingers": (labels == PARTS["finger"]).mean(0) >= 0.5, "outline": gripper & scene,
            "anywhere": grip.any(0), "cube": (labels == PARTS["cube"]).any(0)}


def score(mask_fn, frames: np.ndarray, t: dict[str, np.ndarray]) -> dict:
    start = time.time()
    usable = mask_fn(frames)
    took = round(time.time() - start, 2)
    if usable is None:
        return {"mask": None, "masked": 0.0, "seconds": took}
    m = ~usable

    def share(a, b):  # of the pixels of b, the share in a
        return round(float((a & b).sum() / max(b.sum(), 1)), 3)

    return {"mask": "found", "masked": round(float(m.mean()), 3), "recall": share(m, t["gripper"]),
            "recall_outline": share(m, t["outline"]), "recall_fingers": share(m, t["fingers"]),
            "precision": share(t["anywhere"], m), "masked_off_gripper": round(float((m & ~t["anywhere"]).mean()), 3),
            "masked_cube_not_gripper": round(float((m & t["cube"] & ~t["anywhere"]).mean()), 3), "seconds": took}


def analyse(videos: Path, commits: list[str]) -> dict:
    sys.path.insert(0, str(ROOT / "src"))  # this checkout's worldtune, whatever the venv has installed
    from worldtune.eval.rig import camera_fixed_mask
    from worldtune.eval.video import read_video

    fns = {"now": camera_fixed_mask, **{k: function_at(c) for k, c in EARLIER.items()}}
    fns.update({c: function_at(c) for c in commits})
    rows = {}
    for npz in sorted(videos.glob("lift_*.npz")):
        raw = np.load(npz)
        t = truths(raw["labels"][SAMPLE])
        for codec in [*CODECS, "raw"]:
            if codec == "raw":
                frames = raw["frames"]
            else:
                mp4 = videos / f"{npz.stem}_{codec}.mp4"
                if not mp4.is_file():
                    continue
                frames, _ = read_video(mp4)
            clip = frames[SAMPLE]
            row = {"frames": f"0-{min(len(frames), 185) - 1} step 2 ({len(clip)})",
                   "speed_m_per_frame": float(raw["speed"]), "gripper_share": round(float(t["gripper"].mean()), 3),
                   "fingers_share": round(float(t["fingers"].mean()), 3)}
            for label, fn in fns.items():
                row[label] = score(fn, clip, t)
            rows[f"{npz.stem}_{codec}"] = row
            print(f"{npz.stem:14s} {codec:5s}", "  ".join(
                f"{k}: masked {v['masked']:.3f} recall {v.get('recall', 0):.2f}/{v.get('recall_outline', 0):.2f}/"
                f"{v.get('recall_fingers', 0):.2f} precision {v.get('precision') or 0:.2f}"
                for k, v in row.items() if isinstance(v, dict)), flush=True)
    return rows


def summary(rows: dict) -> dict:
    """Per codec and version: the range over the episodes of each figure."""
    out: dict = {}
    for codec in [*CODECS, "raw"]:
        sel = [r for k, r in rows.items() if k.endswith(f"_{codec}")]
        for version in [v for v in (sel[0] if sel else {}) if isinstance(sel[0][v], dict)]:
            figs = {}
            for f in ("masked", "recall", "recall_outline", "recall_fingers", "precision", "masked_off_gripper"):
                vals = [r[version].get(f) for r in sel if r[version].get(f) is not None]
                figs[f] = [min(vals), max(vals)] if vals else None
            out.setdefault(codec, {})[version] = figs
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--render", type=Path, help="render the episodes into this folder (robosuite venv)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--slow", type=float, default=0.004, help="slow wrist: at most this many m per frame")
    ap.add_argument("--fast", type=float, default=0.012, help="fast wrist: at most this many m per frame")
    ap.add_argument("--videos", type=Path, help="analyse the rendered episodes in this folder (project venv)")
    ap.add_argument("--also-commit", nargs="*", default=[], help="camera_fixed_mask at these commits too")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/wrist_mask_robosuite.json"))
    a = ap.parse_args()
    if a.render:
        render(a.render, a.seeds, {"slow": a.slow, "fast": a.fast})
    if a.videos:
        t = time.time()
        rows = analyse(a.videos, a.also_commit)
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        res = {"scene": f"robosuite Lift, Panda, wrist camera {CAMERA}, {H}x{W}, {FPS} fps, scripted OSC_POSE",
               "call": "camera_fixed_mask(frames[0:185:2]) with default arguments, as SampsonError.reference",
               "truth": truths.__doc__.split("\n\n")[1].replace("\n    ", " ").strip(),
               "figures": "recall: share of the gripper / its outline / its fingers masked; precision: share of the "
                          "masked pixels the gripper covers in some sampled frame",
               "earlier": EARLIER, "commit": commit, "machine": f"{platform.processor() or platform.machine()}, "
               f"{os.cpu_count()} CPUs", "date": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - t, 1),
               "summary": summary(rows), "videos": rows}
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {a.json}")
    if not (a.render or a.videos):
        ap.error("give --render DIR and/or --videos DIR")


if __name__ == "__main__":
    sys.exit(main())
