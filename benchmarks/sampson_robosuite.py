"""Calibrations, references, the whole-frame and the dynamic Sampson figures on footage robosuite renders.

The Sampson figures of docs/benchmarks.md were measured on scenes the project renders itself. This script takes
them to another renderer: robosuite's Lift task (MuJoCo, offscreen through EGL), the Panda arm picking up the cube
under a scripted OSC_POSE controller (above the cube, down, close, lift, carry it aside), seen by three fixed
exterior cameras added to the task's model on a ring about the workspace: `ext_0`, `ext_30` and `ext_78`, turned
0°, 30° and 78° about the vertical axis through the ring's centre, the same height and distance, so the fixed
pairs are 30°, 78° and 48° apart. Each episode is 48 frames at 180x320 and 10 fps (a frame every second control
step at 20 Hz: the arm moves up to 2 cm a frame), flipped upright as LeRobot's conversion scripts do; two episodes
(seeds 0 and 1: another cube position and another place it is set down) give "another episode of the same
task". Every view is written through x264 and SVT-AV1 at CRF 18, 28 and 35, both with a keyframe every 2 frames
and yuv420p, as LeRobot writes, with its raw frames (.npy) and every camera's intrinsics and pose from MuJoCo
(cameras.json).

Before any figure the cameras are verified (`verify`): the cube's corners projected through them against its pixels
in MuJoCo's segmentation render, each view's depth render carried into the other views, true scene points carried
through each pair's F, and the SIFT matches of the raw frames under the true F and under an F with the image flip
forgotten.

The analysis calls the project's functions as benchmarks/sampson_encodes.py does (its `encode_row`): per encode, the
calibration check on the true calibration and two wrong ones (the pair's second camera turned 8° about the ring's
vertical axis; another pair's F), the whole-frame figure per pair and for the clip with its bimodality flag, the
dynamic figure on the true frames and against another episode's view of the same cameras, and reference mode (F
estimated from the clip) with the distance of a plain robust fit from the truth. Beside them: the dynamic figure
under each wrong calibration, and the whole-frame figure under the turned camera as if the check had kept it.

Two commands, the second from the project's venv:

    MUJOCO_GL=egl ROBOSUITE_ENV/bin/python benchmarks/sampson_robosuite.py --render DIR
    PYTHONPATH=src:. .venv/bin/python benchmarks/sampson_robosuite.py --videos DIR

The render venv needs robosuite 1.5 and mujoco 3 (`pip install robosuite==1.5.1 "mujoco>=3.2,<3.4" av`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
H, W = 180, 320
CONTROL_HZ = 20  # robosuite's control rate
STEPS_PER_FRAME = 2  # a frame every 2 control steps: 10 fps, the arm up to ~2 cm a frame
FPS = CONTROL_HZ // STEPS_PER_FRAME
FRAMES = 48
ROLES = ("ext_0", "ext_30", "ext_78")
ANGLES = {"ext_0": 0.0, "ext_30": 30.0, "ext_78": 78.0}  # degrees about the ring's vertical axis
# the ring: centre (world metres; the table top is at z 0.8, the arm's base at x -0.56), horizontal radius,
# height above the centre, azimuth of ext_0 (degrees from the world's +x axis, which faces the arm), vertical fov
RING = {"target": [-0.15, 0.0, 1.02], "radius": 1.3, "height": 0.55, "azimuth0": -39.0, "fovy": 45.0}
TABLE_TOP = 0.8  # z of Lift's table top
CRFS = (18, 28, 35)
CODECS = {"x264": ("libx264", {"g": "2", "preset": "medium"}),
          "av1": ("libsvtav1", {"g": "2", "preset": "10"})}
TURN_DEG = 8.0  # a wrong calibration: the pair's second camera turned this far about the ring's vertical axis


# -- cameras (both venvs) ----------------------------------------------------------------------------------------

def ring_pose(role: str) -> tuple[np.ndarray, np.ndarray]:
    """(eye, R) of a ring camera, R world-to-camera in OpenCV axes (x right, y down, z forward), looking at the
    ring's centre: the pose written into the model. The figures use the pose MuJoCo compiles (`cameras`), not this."""
    target = np.array(RING["target"])
    az = math.radians(RING["azimuth0"] + ANGLES[role])
    eye = target + np.array([RING["radius"] * math.cos(az), RING["radius"] * math.sin(az), RING["height"]])
    z = (target - eye) / np.linalg.norm(target - eye)
    x = np.cross(z, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    return eye, np.stack([x, np.cross(z, x), z])


def turned_about_table(R: np.ndarray, t: np.ndarray, degrees: float) -> tuple[np.ndarray, np.ndarray]:
    """(R, t) of a camera (world to camera) carried `degrees` about the vertical axis through the ring's centre."""
    a = math.radians(degrees)
    Rz = np.array([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0], [0.0, 0.0, 1.0]])
    c = np.array(RING["target"]) + Rz @ (-R.T @ t - np.array(RING["target"]))
    R2 = R @ Rz.T
    return R2, -R2 @ c


def intrinsics(fovy_deg: float, h: int = H, w: int = W) -> np.ndarray:
    """MuJoCo's pinhole: square pixels, vertical field of view `fovy`, principal point at the image centre,
    written with pixel centres at integers (the project's convention) so the centre is ((w-1)/2, (h-1)/2)."""
    f = 0.5 * h / math.tan(math.radians(fovy_deg) / 2)
    return np.array([[f, 0.0, (w - 1) / 2], [0.0, f, (h - 1) / 2], [0.0, 0.0, 1.0]])


def opencv_from_mujoco(xpos: np.ndarray, xmat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, t), world to camera in OpenCV axes, of a MuJoCo camera (its frame's columns in the world, `xmat`).

    A MuJoCo camera looks down its -z with y up in an image OpenGL stores bottom row first; flipped upright
    (row 0 at the top), its pixels are those of a camera with x the same, y and z negated."""
    R = (np.asarray(xmat).reshape(3, 3) @ np.diag([1.0, -1.0, -1.0])).T
    return R, -R @ np.asarray(xpos)


def project(K: np.ndarray, R: np.ndarray, t: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pixels (N, 2), depth along the optical axis (N,)) of world points X (N, 3)."""
    pc = np.asarray(X, np.float64) @ R.T + t
    uv = pc @ K.T
    return uv[:, :2] / uv[:, 2:3], pc[:, 2]


# -- rendering (robosuite venv) ----------------------------------------------------------------------------------

def make_env(seed: int):
    """robosuite's Lift with the Panda under OSC_POSE and the three ring cameras added to its model."""
    from xml.etree import ElementTree as ET

    from robosuite.controllers import load_composite_controller_config
    from robosuite.environments.manipulation.lift import Lift

    class RingLift(Lift):
        def _load_model(self) -> None:
            super()._load_model()
            for role in ROLES:
                eye, R = ring_pose(role)
                # MuJoCo's camera axes in the world: x = OpenCV's x, y = -OpenCV's y (it looks down -z)
                xyaxes = np.concatenate([R[0], -R[1]])
                self.model.worldbody.append(ET.Element("camera", name=role, mode="fixed", fovy=str(RING["fovy"]),
                                                       pos=" ".join(f"{v:.6f}" for v in eye),
                                                       xyaxes=" ".join(f"{v:.6f}" for v in xyaxes)))

    np.random.seed(seed)  # robosuite's placement sampler draws from numpy's global generator
    cfg = load_composite_controller_config(controller="BASIC", robot="Panda")
    env = RingLift(robots="Panda", controller_configs=cfg, has_renderer=False, has_offscreen_renderer=True,
                   use_camera_obs=False, control_freq=CONTROL_HZ, horizon=10_000, ignore_done=True)
    env.reset()
    return env


def cameras(env) -> dict[str, dict]:
    """Every ring camera as MuJoCo has it after compiling (pose, fovy) and in the project's terms (K, R, t)."""
    m, d = env.sim.model, env.sim.data
    out = {}
    for role in ROLES:
        i = m.camera_name2id(role)
        R, t = opencv_from_mujoco(d.cam_xpos[i], d.cam_xmat[i])
        out[role] = {"K": intrinsics(float(m.cam_fovy[i])).tolist(), "R": R.tolist(), "t": t.tolist(),
                     "width": W, "height": H, "mujoco": {"pos": d.cam_xpos[i].tolist(), "xmat": d.cam_xmat[i].tolist(),
                                                        "fovy": float(m.cam_fovy[i])}}
    return out


def _script(env, rng: np.random.Generator) -> list[tuple[np.ndarray, float, int]]:
    """Waypoints (target eef position, gripper command, frames to hold after reaching it): above the cube, down,
    close, lift, carry it to a place the seed draws and set it down."""
    cube = env.sim.data.body_xpos[env.cube_body_id].copy()
    aside = cube + [rng.uniform(-0.15, 0.10), rng.uniform(-0.2, 0.2), 0.0]
    return [(cube + [0, 0, 0.08], -1.0, 0), (cube + [0, 0, -0.005], -1.0, 0), (cube + [0, 0, -0.005], 1.0, 2),
            (cube + [0, 0, 0.15], 1.0, 0), (aside + [0, 0, 0.15], 1.0, 0), (aside + [0, 0, 0.01], 1.0, 0),
            (aside + [0, 0, 0.01], -1.0, 0), (aside + [0, 0, 0.15], -1.0, 20)]


def _depth(env, role: str) -> np.ndarray:
    """Metric depth along the optical axis of `role`'s view, upright (MuJoCo's depth buffer linearised)."""
    m = env.sim.model
    _, z = env.sim.render(camera_name=role, height=H, width=W, depth=True)
    near, far = m.vis.map.znear * m.stat.extent, m.vis.map.zfar * m.stat.extent
    return (near / (1.0 - z * (1.0 - near / far)))[::-1]


def _cube_check(env, cams: dict) -> dict[str, float]:
    """Per role, the largest distance (px) between the cube's projected corners' bounding box and its pixels'
    in MuJoCo's segmentation render: the cameras' intrinsics, pose and the image flip checked against the image."""
    m, d = env.sim.model, env.sim.data
    segs = {r: env.sim.render(camera_name=r, height=H, width=W, segmentation=True)[::-1] for r in cams}
    drawn = np.concatenate([s[..., 1][s[..., 0] == 5] for s in segs.values()])  # objtype 5: a geom
    geoms = [g for g in range(m.ngeom) if m.geom_bodyid[g] == env.cube_body_id and m.geom_type[g] == 6]  # boxes
    g = max(geoms, key=lambda i: int((drawn == i).sum()))  # the visual box (the collision one is not drawn)
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * m.geom_size[g]
    X = d.geom_xpos[g] + corners @ d.geom_xmat[g].reshape(3, 3).T
    out = {}
    for role, c in cams.items():
        seg = segs[role]
        ys, xs = np.nonzero((seg[..., 0] == 5) & (seg[..., 1] == g))
        uv, _ = project(np.array(c["K"]), np.array(c["R"]), np.array(c["t"]), X)
        # a pixel's centre is inside the silhouette: its box reaches half a pixel beyond the outermost centres
        seen = np.array([xs.min() - 0.5, ys.min() - 0.5, xs.max() + 0.5, ys.max() + 0.5])
        drawn = np.array([uv[:, 0].min(), uv[:, 1].min(), uv[:, 0].max(), uv[:, 1].max()])
        out[role] = round(float(np.abs(seen - drawn).max()), 2)
    return out


def _depth_check(env, cams: dict, step: int = 4) -> dict[str, dict[str, float]]:
    """Per ordered pair: the points of view a's depth render carried into view b; of those in view and not hidden,
    the share whose depth b's own render agrees with (within 1 %): the two poses and the flip against the renders."""
    depth = {r: _depth(env, r) for r in cams}
    vv, uu = np.mgrid[0:H:step, 0:W:step]
    out = {}
    for a, ca in cams.items():
        Ka, Ra, ta = (np.array(ca[k]) for k in ("K", "R", "t"))
        z = depth[a][vv, uu].ravel()
        rays = np.c_[uu.ravel(), vv.ravel(), np.ones(z.size)] @ np.linalg.inv(Ka).T
        X = (rays * z[:, None] - ta) @ Ra  # camera to world: R^T (x - t)
        for b, cb in cams.items():
            if a == b:
                continue
            uv, zb = project(np.array(cb["K"]), np.array(cb["R"]), np.array(cb["t"]), X)
            px = np.round(uv).astype(int)
            ok = (px[:, 0] >= 0) & (px[:, 0] < W) & (px[:, 1] >= 0) & (px[:, 1] < H) & (zb > 0)
            seen = depth[b][px[ok, 1], px[ok, 0]]
            visible = seen > zb[ok] * 0.99 - 0.01  # not hidden behind something nearer in b
            agree = np.abs(seen - zb[ok]) < 0.01 * zb[ok]
            share = float(agree.sum() / max(visible.sum(), 1))
            out[f"{a}->{b}"] = {"points": int(visible.sum()), "depth_agrees": round(share, 3)}
    return out


def render_episode(seed: int, speed: float, frames: int = FRAMES) -> dict:
    """One Lift episode under the scripted controller: the ring's views (T, H, W, 3) uint8 upright, the cameras,
    the world points of the gripper site and of the cube per frame, and the camera checks at frames 0 and T/2."""
    from wrist_mask_robosuite import osc_action  # the render venv runs this file as a script, from benchmarks/

    env = make_env(seed)
    rng = np.random.default_rng(seed)
    cams = cameras(env)
    way = _script(env, rng)
    views: dict[str, list[np.ndarray]] = {r: [] for r in ROLES}
    eef, cube, checks, w, held = [], [], {}, 0, 0
    for i in range(frames):
        for role in ROLES:
            views[role].append(np.ascontiguousarray(env.sim.render(camera_name=role, height=H, width=W)[::-1]))
        if i in (0, frames // 2):
            checks[f"frame_{i}"] = {"cube_box_px": _cube_check(env, cams), "depth": _depth_check(env, cams)}
        pos = env.sim.data.site_xpos[env.robots[0].eef_site_id["right"]].copy()
        eef.append(pos.tolist())
        cube.append(env.sim.data.body_xpos[env.cube_body_id].tolist())
        target, grip, hold = way[min(w, len(way) - 1)]
        action = osc_action(env.action_dim, pos, target, grip, speed)
        for _ in range(STEPS_PER_FRAME):
            env.step(action)
        if w < len(way) and np.linalg.norm(target - pos) < 0.015:
            held += 1
            if held > hold:
                w, held = w + 1, 0
    env.close()
    return {"views": {r: np.stack(v) for r, v in views.items()}, "cameras": cams, "eef": eef, "cube": cube,
            "checks": checks, "waypoints_reached": w}


def render(out: Path, seeds: list[int], speed: float, frames: int = FRAMES) -> None:
    """Each seed's episode into `out`: every view as raw frames (.npy) and through every codec and CRF, as LeRobot
    writes (a keyframe every 2 frames, yuv420p), and cameras.json."""
    from wrist_mask_robosuite import write_mp4  # the render venv runs this file as a script, from benchmarks/

    out.mkdir(parents=True, exist_ok=True)
    meta: dict = {"ring": RING, "angles": ANGLES, "fps": FPS, "speed_m_per_frame": speed, "episodes": {}}
    for seed in seeds:
        t = time.time()
        ep = render_episode(seed, speed, frames)
        name = f"ep{seed}"
        for role, video in ep["views"].items():
            np.save(out / f"{name}_{role}.npy", video)
            for codec in CODECS:
                for crf in CRFS:
                    encoder, options = CODECS[codec]
                    write_mp4(out / f"{name}_{role}_{codec}_crf{crf}.mp4", video, encoder, {**options, "crf": str(crf)},
                              FPS)
        meta["cameras"] = ep["cameras"]  # the rig is fixed: every episode has the same cameras
        meta["episodes"][name] = {"seed": seed, "frames": frames, "eef": ep["eef"], "cube": ep["cube"],
                                  "checks": ep["checks"], "waypoints_reached": ep["waypoints_reached"]}
        travel = np.linalg.norm(np.diff(np.array(ep["eef"]), axis=0), axis=1).sum()
        print(f"{name}: {frames} frames, eef travel {travel:.2f} m, waypoints {ep['waypoints_reached']}, checks "
              f"{json.dumps(ep['checks']['frame_0']['cube_box_px'])}, {time.time() - t:.0f} s", flush=True)
    (out / "cameras.json").write_text(json.dumps(meta, indent=1) + "\n")


# -- analysis (project venv) -------------------------------------------------------------------------------------

def load_cameras(videos: Path) -> tuple[dict, dict]:
    """(the render's metadata, {role: worldtune.scene.raycast.Camera}) from cameras.json."""
    from worldtune.scene.raycast import Camera

    meta = json.loads((videos / "cameras.json").read_text())
    cams = {r: Camera(np.array(c["K"]), np.array(c["R"]), np.array(c["t"]), c["width"], c["height"])
            for r, c in meta["cameras"].items()}
    return meta, cams


def calibrations(cams: dict) -> dict[str, dict[str, np.ndarray]]:
    """The true F of every pair, the F with the pair's second camera turned 8° about the table, another pair's F
    (the same three as tests/eval/project_rig.py's)."""
    from tests.eval.project_rig import fundamental
    from worldtune.eval.rig import pair_key
    from worldtune.scene.raycast import Camera

    pairs = [("ext_0", "ext_30"), ("ext_0", "ext_78"), ("ext_30", "ext_78")]
    out: dict[str, dict[str, np.ndarray]] = {"right": {}, "turned_8deg": {}, "another_pair": {}}
    for i, (a, b) in enumerate(pairs):
        key = pair_key(a, b)
        out["right"][key] = fundamental(cams[a], cams[b])
        R, t = turned_about_table(cams[b].R, cams[b].t, TURN_DEG)
        out["turned_8deg"][key] = fundamental(cams[a], Camera(cams[b].K, R, t, W, H))
        c, d = pairs[(i + 1) % 3]
        out["another_pair"][key] = fundamental(cams[c], cams[d])
    return out


def verify(videos: Path, meta: dict, cams: dict, cals: dict) -> dict:
    """Is each true F right? Asked before any figure: a wrong camera convention would make every one meaningless.

    - the render's own checks (the cube's corners against its segmented pixels; each view's depth carried into
      the others against their depth renders), as cameras.json records them;
    - true correspondences: the gripper site and the cube of every frame and the table's top corners projected
      into both views of each pair, their Sampson distance under the pair's F (index order x_aᵀ F x_b) and under
      its transpose (the wrong order must read far off);
    - the image itself: the distinct SIFT matches of episode 0's raw frames (pooled as the calibration check pools
      them), the share within 1 px of the true F, and of the F of the same cameras with the upright flip forgotten.
    With the correct matches (within 0.5 px of the true F) it also says how far each wrong calibration lies from
    the truth, over the images (`distance_to_truth`) and at those matches: a wrong F the matches cannot tell
    from the truth is one whose lines pass within 0.5 px of them."""
    from tests.eval.droid_scene import distance_to_truth
    from worldtune.eval.epipolar import distinct, fundamental_from_cameras, sampson_distance
    from worldtune.eval.sampson import SampsonError

    out: dict = {"render_checks": {k: v["checks"] for k, v in meta["episodes"].items()}, "pairs": {}}
    table = [[x, y, TABLE_TOP] for x in (-0.4, 0.4) for y in (-0.4, 0.4)]  # Lift's 0.8 m table, centred
    points = np.array([p for ep in meta["episodes"].values() for p in ep["eef"] + ep["cube"]] + table)
    flip = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, H - 1.0], [0.0, 0.0, 1.0]])  # row v -> H-1-v

    matcher = SampsonError().matcher(reference=True)
    raw = {r: np.load(videos / f"ep0_{r}.npy") for r in ROLES}
    feats = {r: [matcher.detect(f, None) for f in raw[r]] for r in ROLES}
    for key, F in cals["right"].items():
        a, b = key.split("|")
        xa, _ = project(cams[a].K, cams[a].R, cams[a].t, points)
        xb, _ = project(cams[b].K, cams[b].R, cams[b].t, points)
        unflipped = fundamental_from_cameras(flip @ cams[a].K, cams[a].R, cams[a].t, flip @ cams[b].K, cams[b].R,
                                             cams[b].t)
        m = [matcher.match(fa, fb) for fa, fb in zip(feats[a], feats[b])]
        x0, x1 = np.concatenate([q[0] for q in m]), np.concatenate([q[1] for q in m])
        keep = distinct(x0, x1)
        x0, x1 = x0[keep], x1[keep]
        d_true = sampson_distance(F, x0, x1)
        good = d_true <= 0.5
        out["pairs"][key] = {
            "true_points": len(points), "true_points_max_px": float(f"{sampson_distance(F, xa, xb).max():.2e}"),
            "true_points_transposed_median_px": _round(np.median(sampson_distance(F.T, xa, xb))),
            "distinct_sift_matches": len(x0), "within_1px_true_F": _round((d_true <= 1).mean()),
            "within_1px_flip_forgotten": _round((sampson_distance(unflipped, x0, x1) <= 1).mean()),
            "correct_matches": int(good.sum()), "correct_median_px": _round(np.median(d_true[good])) if good.any() else None,
            "wrong_from_truth_px": {n: {"over_images": _round(distance_to_truth(c[key], F)),
                                        "at_correct_matches": _round(np.median(sampson_distance(c[key], x0[good], x1[good])))
                                        if good.any() else None,
                                        "correct_matches_within_0.5px": int((sampson_distance(c[key], x0[good], x1[good])
                                                                             <= 0.5).sum())}
                                    for n, c in cals.items() if n != "right"}}
    return out


def _round(x) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 3)


def read_views(videos: Path, episode: str, codec: str, crf: int) -> dict[str, np.ndarray]:
    """The ring's views of one episode through one encode, decoded by worldtune's reader."""
    from worldtune.eval.video import read_video

    return {r: read_video(videos / f"{episode}_{r}_{codec}_crf{crf}.mp4")[0] for r in ROLES}


def dynamic_under(views: dict, cals: dict) -> dict:
    """The dynamic figure of the true frames under each wrong calibration, per pair: the moving silhouettes are the
    calibration check's last witness, asked only when the matches say nothing; do they see what the matches miss?"""
    from worldtune.eval.sampson import SampsonError

    metric = SampsonError()
    return {name: {key: _round(metric.crossview_dynamic(views[key.split("|")[0]], views[key.split("|")[1]], F,
                                                        "calibrated", key).median) for key, F in pairs.items()}
            for name, pairs in cals.items() if name != "right"}


def whole_frame_under(views: dict, pairs: dict, K: dict) -> dict:
    """The whole-frame figure of the true frames scored under a wrong calibration as if the check had kept it
    (it keeps the turned camera here): what a wrong calibration the clip cannot tell costs the figure."""
    from worldtune.eval.rig import PairReference, Reference
    from worldtune.eval.sampson import SampsonError

    ref = Reference("ep0", {r: tuple(v.shape[1:3]) for r, v in views.items()}, set(),
                    {k: PairReference(F, "calibrated") for k, F in pairs.items()}, K=K)
    score = SampsonError().score_views(views, reference=ref)
    clip = score.overall("crossview")
    return {"median_px": _round(clip.median), "frames": clip.evaluated,
            "pairs": {k: {"median_px": _round(s.median), "frames": s.evaluated} for k, s in score.crossview.items()}}


def analyse(videos: Path, codecs: list[str], crfs: list[int]) -> dict:
    from benchmarks.sampson_encodes import encode_row

    meta, cams = load_cameras(videos)
    cals = calibrations(cams)
    K = {r: c.K for r, c in cams.items()}
    out: dict = {"verify": verify(videos, meta, cams, cals), "encodes": {}}
    print(json.dumps(out["verify"]["pairs"], indent=1), flush=True)
    for codec in codecs:
        for crf in crfs:
            t = time.time()
            views, others = read_views(videos, "ep0", codec, crf), read_views(videos, "ep1", codec, crf)
            row = encode_row(views, others, cals, K, lambda a, b: cals["right"][f"{a}|{b}"])
            row["dynamic_wrong_calibration"] = dynamic_under(views, cals)
            row["whole_frame_under_turned"] = whole_frame_under(views, cals["turned_8deg"], K)
            row["seconds"] = round(time.time() - t, 1)
            out["encodes"][f"{codec}_crf{crf}"] = row
            clip = row["crossview_clip"]
            print(f"{codec} CRF {crf}: clip {clip['median_px']} px ({clip['frames']} frames) bimodal "
                  f"{bool(clip['bimodal'])}; kept " + json.dumps({n: {k: v['kept'] for k, v in c.items()}
                                                                   for n, c in row["calibration"].items()}) +
                  "; reference " + json.dumps({k: v["accepted"] for k, v in row["reference_mode"].items()}) +
                  f"; {row['seconds']} s", flush=True)
    out["summary"] = summary(out["encodes"], codecs, crfs)
    return out


def summary(rows: dict, codecs: list[str], crfs: list[int]) -> dict:
    """What docs/benchmarks.md reports, from the per-encode rows: calibrations kept and dropped, references
    accepted (and how many of them lie within 1 px of the truth), the clip's whole-frame figure per codec across
    the CRFs with its spread, and the dynamic figure's floor."""
    true = [(k, p) for r in rows.values() for k, p in r["calibration"]["right"].items()]
    wrong = [(n, k, p) for r in rows.values() for n in ("turned_8deg", "another_pair")
             for k, p in r["calibration"][n].items()]
    ref = [p for r in rows.values() for p in r["reference_mode"].values()]
    right_ref = [p for p in ref if p["from_truth_px"] is not None and p["from_truth_px"] <= 1.0]
    spreads = {}
    for codec in codecs:
        vals = [rows[f"{codec}_crf{c}"]["crossview_clip"]["median_px"] for c in crfs]
        ok = [v for v in vals if v is not None]
        spreads[codec] = {"clip_px": vals, "spread_px": _round(max(ok) - min(ok)) if len(ok) == len(vals) else None}
    dyn_true = [v["median_px"] for r in rows.values() for v in r["dynamic_true"].values() if v["median_px"] is not None]
    return {"true_kept": f"{sum(p['kept'] for _, p in true)} of {len(true)}",
            "wrong_dropped": f"{sum(not p['kept'] for *_, p in wrong)} of {len(wrong)}",
            **{f"{n}_dropped": f"{sum(not p['kept'] for m, _, p in wrong if m == n)} of {sum(m == n for m, *_ in wrong)}"
               for n in ("turned_8deg", "another_pair")},
            "reference_accepted": f"{sum(p['accepted'] for p in ref)} of {len(ref)}",
            "reference_accepted_within_1px_of_truth": f"{len(right_ref)} (of the accepted)",
            "whole_frame": spreads,
            "dynamic_true_floor_px": [min(dyn_true), max(dyn_true)] if dyn_true else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--render", type=Path, help="render the episodes into this folder (robosuite venv)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--speed", type=float, default=0.03, help="the gripper is sent at most this many m a frame")
    ap.add_argument("--frames", type=int, default=FRAMES, help="frames per episode")
    ap.add_argument("--videos", type=Path, help="analyse the rendered episodes in this folder (project venv)")
    ap.add_argument("--codecs", nargs="+", default=list(CODECS), choices=list(CODECS))
    ap.add_argument("--crf", type=int, nargs="+", default=list(CRFS))
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/sampson_robosuite.json"))
    a = ap.parse_args()
    if a.render:
        render(a.render, a.seeds, a.speed, a.frames)
    if a.videos:
        t = time.time()
        res = analyse(a.videos, a.codecs, a.crf)
        commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        meta = json.loads((a.videos / "cameras.json").read_text())
        res = {"scene": f"robosuite Lift, Panda, scripted OSC_POSE pick, carry and place; ring cameras {list(ANGLES)} "
                        f"at {list(ANGLES.values())} degrees, {H}x{W}, {FPS} fps, "
                        f"{meta['episodes']['ep0']['frames']} frames; episode ep0 "
                        f"(seed 0), another episode ep1 (seed 1)",
               "ring": meta["ring"], "cameras": meta["cameras"], "commit": commit,
               "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": round(time.time() - t, 1), **res}
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps(res["summary"], indent=1))
        print(f"wrote {a.json}")
    if not (a.render or a.videos):
        ap.error("give --render DIR and/or --videos DIR")


if __name__ == "__main__":
    sys.exit(main())
