"""The project's own scene (worldtune.scene, style "hard") at DROID size with wide-baseline exterior pairs.

The DROID-size Sampson figures were tuned on tests/eval/droid_scene.py; this rig is another renderer setting:
the demo tabletop (`SyntheticEpisode`, a plain table before a wall) at 180x320, its first exterior camera where
the scene puts it and two more placed around the table at ~30° and ~78° from it (same height and distance), so
the three fixed pairs are 30°, 78° and 48° apart. One rig for every episode: another episode's view is the
right camera with the arm elsewhere. Every camera is known, so each pair's true F is exact.
"""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

H, W = 180, 320
TARGET = np.array([0.0, 0.02, 0.04])  # where the scene's exterior cameras look
ROLES = ("ext_0", "ext_30", "ext_78")
ANGLES = {"ext_0": 0.0, "ext_30": 30.0, "ext_78": 78.0}
# hard_av1: the scene's textures, SVT-AV1 CRF 30 (as LeRobot writes); tex5_low_x264: other textures, every camera
# 12 cm lower, worldtune's x264 writer at CRF 23; plain_wall_av1: the wall's posters painted over (a faint plain
# wall, as in a lab), so that across the wide pairs SIFT finds few or no correct matches
SETTINGS = {"hard_av1": {"texture_seed": 0, "lower": 0.0, "codec": "av1", "crf": 30, "plain_wall": False},
            "tex5_low_x264": {"texture_seed": 5, "lower": 0.12, "codec": "x264", "crf": 23, "plain_wall": False},
            "plain_wall_av1": {"texture_seed": 0, "lower": 0.0, "codec": "av1", "crf": 30, "plain_wall": True}}


def rig(setting: dict, turn: dict[str, float] | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(R, t) per role: the scene's first exterior camera, lowered by `lower` m, and the same camera turned
    about the table's vertical axis through TARGET by each role's angle (plus `turn[role]` degrees)."""
    from worldtune.scene.episode import SyntheticEpisode
    from worldtune.scene.raycast import look_at

    R0, t0 = SyntheticEpisode(0, 2, style="hard").ext["exterior_1_left"]
    eye = -R0.T @ t0 - np.array([0.0, 0.0, setting["lower"]])
    out = {}
    for role, deg in ANGLES.items():
        a = math.radians(deg + (turn or {}).get(role, 0.0))
        rot = np.array([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0], [0.0, 0.0, 1.0]])
        out[role] = look_at(TARGET + rot @ (eye - TARGET), TARGET)
    return out


def episode_views(index: int, frames: int, setting: dict, offset: np.ndarray | None = None,
                  turn: dict[str, float] | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """The fixed views of episode `index` (the red block to the bowl) under the setting's rig, and its cameras.

    The scene names its exterior cameras; each role is drawn as its first exterior camera placed where the role is.
    `offset` (metres, world x right / y away / z up) moves the arm and the block it carries: a misplaced arm;
    `turn` (degrees per role) turns those cameras further about the table: a wrong view of the whole scene."""
    from worldtune.scene.episode import SyntheticEpisode
    from worldtune.scene.raycast import Camera

    ep = SyntheticEpisode(index, frames, 0, H, W, style="hard", targets=("red",), texture_seed=setting["texture_seed"])
    if setting.get("plain_wall"):
        noise = np.random.default_rng(3).random((256, 256, 1)).astype(np.float32)
        ep.tex = {**ep.tex, "mat": np.broadcast_to(0.62 + 0.03 * cv2.GaussianBlur(noise, (0, 0), 6)[..., None], (256, 256, 3)).copy()}
    ext = rig(setting, turn)
    views = {}
    for role in ROLES:
        ep.ext = {**ep.ext, "exterior_1_left": ext[role]}
        ep._static_cache.clear()
        views[role] = np.stack([_draw(ep, i, offset) for i in range(frames)])
    return views, {r: Camera(ep.K_ext, *ext[r], W, H) for r in ROLES}


def _draw(ep, i: int, offset: np.ndarray | None) -> np.ndarray:
    """Frame i of the episode's first exterior camera, the arm (and a held block) moved by `offset`."""
    if offset is None:
        return ep.render_view("exterior_1_left", i)
    g, opening, held = ep.gripper(i)
    block = ep.block_position(ep.target, i) + (offset if held else 0.0)
    return ep.render_state("exterior_1_left", g + offset, opening, {ep.target: block})


def through(frames: np.ndarray, codec: str, crf: int, tmp: Path, name: str) -> np.ndarray:
    """Frames through the setting's encode and back."""
    from tests.eval.droid_scene import encode
    from worldtune.data.video import write_video
    from worldtune.eval.video import read_video

    if codec == "av1":
        return encode(frames, "av1", crf=crf)
    return read_video(write_video(tmp / f"{name}.mp4", frames, 15, crf=crf))[0]


def fundamental(ca, cb) -> np.ndarray:
    from worldtune.eval.epipolar import fundamental_from_cameras

    return fundamental_from_cameras(ca.K, ca.R, ca.t, cb.K, cb.R, cb.t)


def calibrations(cams: dict, setting: dict) -> dict[str, dict[str, np.ndarray]]:
    """The true F of every pair, the F with the pair's second camera turned 8° about the table, another pair's F."""
    from worldtune.eval.rig import pair_key
    from worldtune.scene.raycast import Camera

    pairs = [("ext_0", "ext_30"), ("ext_0", "ext_78"), ("ext_30", "ext_78")]
    out: dict[str, dict[str, np.ndarray]] = {"right": {}, "turned_8deg": {}, "another_pair": {}}
    for i, (a, b) in enumerate(pairs):
        key = pair_key(a, b)
        out["right"][key] = fundamental(cams[a], cams[b])
        R, t = rig(setting, {b: 8.0})[b]
        out["turned_8deg"][key] = fundamental(cams[a], Camera(cams[b].K, R, t, W, H))
        c, d = pairs[(i + 1) % 3]
        out["another_pair"][key] = fundamental(cams[c], cams[d])
    return out
