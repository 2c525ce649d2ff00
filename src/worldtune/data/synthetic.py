"""The demo dataset: a procedurally rendered tabletop scene written as a LeRobot dataset.

Why: the demo and the tests need a multi-camera robot dataset with no download, and the
evaluation's geometry metrics need ground truth. Every pixel here is an exact pinhole projection
(worldtune.data.raycast: one ray per pixel centre, intersected with textured planes, boxes and a
cylinder), so the true cameras' fundamental matrix explains every correspondence up to the pixel grid. Scene: a textured
table on a textured floor before a textured wall, three blocks and a shallow bowl; a gantry arm
moves to one block, grasps it, carries it to the bowl (or, where the episode says so, onto another block)
and lets go. Cameras (OpenCV convention,
x_cam = R @ x_world + t, +z forward, +y down, pixel centres at integer coordinates):
`exterior_1_left` and `exterior_2_left` are static, `wrist_left` rides on the gripper (whose palm
and fingers are always in its view).

Two styles: `"demo"` (textured table, exterior cameras ~70° apart, the same rig in every episode)
and `"hard"`, made to break evaluation metrics the way real robot footage does: a plain,
low-texture table and wall, a wide-baseline exterior pair ~80° apart, and the exterior cameras
re-placed a little in every episode (as DROID's are), so another episode's view is another rig.

Rendering is cheap because the static part of each exterior view is drawn once per episode and
only the moving primitives (arm, carried block) are ray-cast per frame, inside their screen box.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from worldtune.atomic import atomic_write_bytes
from worldtune.data.raycast import Box, Camera, Cylinder, Plane, intrinsics, look_at, render
from worldtune.data.video import VideoWriter

# The scene generator's version: recorded with every model trained on its episodes (the seed models), since a
# change of rendering, textures or trajectories changes what such a model has learned.
SCENE_VERSION = "2026.12.1"
CAMERA_NAMES: tuple[str, ...] = ("exterior_1_left", "exterior_2_left", "wrist_left")
FEATURE_PREFIX = "observation.images."
FPS = 15
ROBOT_TYPE = "worldtune_synthetic_gantry"  # info.json's robot_type: Cosmos 3 gives the robot a slot named after it
ACTION_NAMES: tuple[str, ...] = ("x", "y", "z", "gripper")  # the gripper's next position and opening
_ROLE_ALIASES = {"exterior_1": "exterior_1_left", "exterior_2": "exterior_2_left", "wrist": "wrist_left"}


def camera_name(role: str) -> str:
    """Accept a camera name, its feature key, or a prepare role (exterior_1, exterior_2, wrist)."""
    name = role[len(FEATURE_PREFIX):] if role.startswith(FEATURE_PREFIX) else role
    name = _ROLE_ALIASES.get(name, name)
    if name not in CAMERA_NAMES:
        raise KeyError(f"unknown camera '{role}': one of {', '.join(CAMERA_NAMES)}")
    return name


# ------------------------------------------------------------------------------------ textures
def _noise(rng: np.random.Generator, size: int, octaves=(4, 8, 16, 32, 64)) -> np.ndarray:
    """Tileable multi-octave value noise in [0,1], (size,size)."""
    out = np.zeros((size, size), np.float32)
    amp, total = 1.0, 0.0
    for o in octaves:
        g = rng.random((o, o)).astype(np.float32)
        g = np.pad(g, 2, mode="wrap")  # wrap so the upsampled tile is seamless
        big = cv2.resize(g, ((o + 4) * size // o,) * 2, interpolation=cv2.INTER_CUBIC)
        m = 2 * size // o
        out += amp * big[m:m + size, m:m + size]
        total += amp
        amp *= 0.6
    out /= total
    return (out - out.min()) / max(1e-6, out.max() - out.min())


def _make_textures(seed: int, size: int = 256, style: str = "demo") -> dict[str, np.ndarray]:
    """Float32 RGB textures in [0,1]: rich in blobs and corners so SIFT finds keypoints ("demo"),
    or a plain table and a faint wall ("hard")."""
    rng = np.random.default_rng(seed)
    ii, jj = np.mgrid[0:size, 0:size]
    checker = (((ii // 32) + (jj // 32)) % 2).astype(np.float32)
    tex: dict[str, np.ndarray] = {}
    n1, n2 = _noise(rng, size), _noise(rng, size)
    tex["table"] = np.stack([0.45 + 0.35 * n1, 0.30 + 0.25 * n1, 0.15 + 0.15 * n2], -1) * (0.75 + 0.25 * checker[..., None])
    n3 = _noise(rng, size)
    tex["floor"] = np.stack([0.25 + 0.5 * n3] * 3, -1) * (0.6 + 0.4 * checker[..., None])
    n4, n5, n6 = _noise(rng, size), _noise(rng, size), _noise(rng, size)
    tex["wall"] = np.stack([0.3 + 0.6 * n4, 0.3 + 0.6 * n5, 0.3 + 0.6 * n6], -1)
    if style == "hard":  # a plain laminate table: few, weak features where the robot works
        tex["table"] = np.stack([0.62 + 0.04 * n1, 0.58 + 0.04 * n1, 0.52 + 0.03 * n2], -1)
    for name, rgb in (("red", (0.85, 0.15, 0.12)), ("blue", (0.15, 0.3, 0.85)), ("green", (0.15, 0.7, 0.2)),
                      ("bowl", (0.9, 0.8, 0.25)), ("arm", (0.6, 0.6, 0.65))):
        n = _noise(rng, size, octaves=(8, 16, 32))
        stripes = (((ii + jj) // 24) % 2).astype(np.float32)
        tex[name] = np.clip(np.array(rgb, np.float32) * (0.45 + 0.55 * n[..., None]) * (0.8 + 0.2 * stripes[..., None]), 0, 1)
    m1, m2 = _noise(rng, size, octaves=(16, 32, 64)), _noise(rng, size, octaves=(16, 32, 64))
    mat = np.stack([0.1 + 0.85 * m1, 0.1 + 0.8 * m2, 0.15 + 0.7 * (1 - m1)], -1).astype(np.float32)
    for _ in range(70):  # a printed mat: blobs and corners SIFT can match across wide baselines
        c = tuple(float(v) for v in rng.random(3))
        p = tuple(int(v) for v in rng.integers(0, size, 2))
        if rng.random() < 0.5:
            cv2.circle(mat, p, int(rng.integers(3, 12)), c, -1)
        else:
            cv2.rectangle(mat, p, tuple(int(v) for v in np.clip(np.array(p) + rng.integers(-18, 18, 2), 0, size - 1)), c, -1)
    tex["mat"] = mat
    return {k: np.ascontiguousarray(v.astype(np.float32)) for k, v in tex.items()}


# ------------------------------------------------------------------------------------ episodes
_BLOCKS = {"red": ("cube", 0.025), "blue": ("cube", 0.025), "green": ("block", 0.02)}
_ARM_TOP = 0.75


def _smooth(a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    s = min(1.0, max(0.0, s))
    s = s * s * (3 - 2 * s)
    return a + (b - a) * s


Keys = list[tuple[float, np.ndarray]]  # (fraction of the episode, gripper position), increasing fractions


def _scripted_keys(ep: "SyntheticEpisode") -> tuple[Keys, tuple[float, float]]:
    """The one script: home, above the block, down, grasp, up, over where it goes, down, release, up, each at a
    fixed fraction of the episode. Keys and the (close, release) fractions of the grasp."""
    blk = ep.blocks[ep.target]
    home = np.array([0.0, -0.05, 0.35])
    above_b, at_b = np.array([blk[0], blk[1], 0.2]), np.array([blk[0], blk[1], 0.0])
    above_w, at_w = np.array([ep.place[0], ep.place[1], 0.2]), ep.place.copy()
    return [(0.0, home), (0.3, above_b), (0.42, at_b), (0.5, at_b), (0.6, above_b), (0.8, above_w),
            (0.88, at_w), (0.93, at_w), (1.0, above_w)], (0.46, 0.9)


def _varied_keys(ep: "SyntheticEpisode", rng: np.random.Generator) -> tuple[Keys, tuple[float, float]]:
    """The same task with a path drawn per episode, as teleoperated demonstrations differ: the start, a detour
    over the table on the way to the block (most episodes) and to the bowl (some), approach and lift heights,
    each move's speed and pauses on the way. Neither the first frame nor the instruction tells which, only the
    robot's actions do: what a forward-dynamics model must read them for."""
    blk = ep.blocks[ep.target]

    def over_table(lo: float, hi: float) -> np.ndarray:
        return np.array([rng.uniform(-0.35, 0.35), rng.uniform(-0.22, 0.22), rng.uniform(lo, hi)])

    h_b, h_w = rng.uniform(0.1, 0.26), rng.uniform(0.1, 0.26)
    above_b, at_b = np.array([blk[0], blk[1], h_b]), np.array([blk[0], blk[1], 0.0])
    above_w, at_w = np.array([ep.place[0], ep.place[1], h_w]), ep.place.copy()
    moves: list[tuple[str, np.ndarray]] = [("start", over_table(0.25, 0.4))]
    if rng.random() < 0.8:
        moves.append(("move", over_table(0.12, 0.35)))
    moves += [("move", above_b), ("move", at_b), ("grasp", at_b), ("move", above_b)]
    if rng.random() < 0.4:
        moves.append(("move", over_table(0.15, 0.35)))
    moves += [("move", above_w), ("move", at_w), ("release", at_w), ("move", above_w)]
    times, keys, grasp = [0.0], [moves[0][1]], [0.0, 1.0]
    for kind, pos in moves[1:]:
        if kind == "move":
            dist = float(np.linalg.norm(pos - keys[-1]))
            times.append(times[-1] + (0.3 + dist) * rng.uniform(0.5, 1.6))
        else:  # the fingers close or open halfway through a short stop
            times.append(times[-1] + rng.uniform(0.1, 0.25))
            grasp[0 if kind == "grasp" else 1] = (times[-2] + times[-1]) / 2
        keys.append(pos)
        if kind == "move" and rng.random() < 0.25:  # a pause
            times.append(times[-1] + rng.uniform(0.1, 0.4))
            keys.append(pos)
    total = times[-1]
    return [(t / total, p) for t, p in zip(times, keys)], (grasp[0] / total, grasp[1] / total)


@dataclass
class SyntheticEpisode:
    """One episode: object placement, the arm's trajectory, cameras and rendering per frame."""

    index: int
    length: int
    seed: int = 0
    height: int = 180
    width: int = 320
    success: bool = True
    style: Literal["demo", "hard"] = "demo"
    task: str = ""
    targets: tuple[str, ...] = ()  # blocks the arm may pick (empty = any of red, blue, green)
    rig_jitter: float = 0.0  # "demo" style: exterior cameras re-placed by up to this many metres per episode
    texture_seed: int | None = None  # the scene's look (None = seed): sets of other seeds in the same room
    motion: Literal["scripted", "varied"] = "scripted"  # the arm's path: one script, or drawn per episode
    place_on: str = "bowl"  # where the block goes: the bowl, or stacked on the block of this name
    blocks: dict[str, np.ndarray] = field(default_factory=dict)
    target: str = ""
    bowl: np.ndarray = field(default_factory=lambda: np.zeros(3))
    place: np.ndarray = field(default_factory=lambda: np.zeros(3))  # where the block's bottom is let go
    _static_cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, self.index])
        self.tex = _textures(self.seed if self.texture_seed is None else self.texture_seed, self.style)
        # place blocks and bowl on a jittered grid of slots so they never overlap
        slots = [np.array([x, y]) for x in (-0.3, -0.1, 0.1, 0.3) for y in (-0.12, 0.12)]
        order = rng.permutation(len(slots))
        names = list(_BLOCKS)
        for k, name in enumerate(names):
            xy = slots[order[k]] + rng.uniform(-0.03, 0.03, 2)
            self.blocks[name] = np.array([xy[0], xy[1], _BLOCKS[name][1]])
        bxy = slots[order[len(names)]] + rng.uniform(-0.02, 0.02, 2)
        self.bowl = np.array([bxy[0], bxy[1], 0.0])
        self.yaws = {n: float(rng.uniform(-0.6, 0.6)) for n in names}
        allowed = [n for n in names if n in self.targets] if self.targets else names
        if not allowed:
            raise ValueError(f"targets {self.targets} name no block: use some of {', '.join(names)}")
        self.target = allowed[int(rng.integers(len(allowed)))]
        self.place = self._place()
        shape = _BLOCKS[self.target][0]
        if not self.task:
            self.task = (f"picks up the {self.target} {shape} and places it in the bowl." if self.place_on == "bowl" else
                         f"picks up the {self.target} {shape} and stacks it on the {self.place_on} "
                         f"{_BLOCKS[self.place_on][0]}.")
        self.keys, self.grasp = (_varied_keys(self, np.random.default_rng([self.seed, self.index, 11]))
                                 if self.motion == "varied" else _scripted_keys(self))
        self.K_ext = intrinsics(self.width, self.height, 62.0)
        self.K_wrist = intrinsics(self.width, self.height, 90.0)
        if self.style == "hard":  # ~80° apart, re-placed by a few cm and degrees every episode
            jitter = np.random.default_rng([self.seed, self.index, 7])
            eyes = {"exterior_1_left": [-0.62, -0.45, 0.60], "exterior_2_left": [0.62, -0.45, 0.58]}
            self.ext = {n: look_at(np.array(e) + jitter.uniform(-0.03, 0.03, 3),
                                   np.array([0.0, 0.02, 0.04]) + jitter.uniform(-0.03, 0.03, 3)) for n, e in eyes.items()}
        else:
            jitter = np.random.default_rng([self.seed, self.index, 7])
            j = self.rig_jitter
            eyes = {"exterior_1_left": ([-0.42, -0.62, 0.42], [0.0, 0.02, 0.04]),
                    "exterior_2_left": ([0.45, -0.58, 0.38], [0.0, 0.04, 0.04])}
            self.ext = {n: look_at(np.array(e) + (jitter.uniform(-j, j, 3) if j else 0.0),
                                   np.array(c) + (jitter.uniform(-j, j, 3) if j else 0.0)) for n, (e, c) in eyes.items()}

    def _place(self) -> np.ndarray:
        """Where the carried block's bottom is let go: on the bowl's floor, or on top of the block `place_on`."""
        if self.place_on == "bowl":
            return np.array([self.bowl[0], self.bowl[1], 0.03])
        if self.place_on not in _BLOCKS or self.place_on == self.target:
            raise ValueError(f"place_on '{self.place_on}' is not a place for the {self.target} block: 'bowl' or "
                             f"another block ({', '.join(n for n in _BLOCKS if n != self.target)})")
        under = self.blocks[self.place_on]
        return np.array([under[0], under[1], 2 * _BLOCKS[self.place_on][1]])

    # trajectory ---------------------------------------------------------------------------
    def gripper(self, i: int) -> tuple[np.ndarray, float, bool]:
        """Gripper position (bottom of the fingers), opening in metres, and whether it holds the block."""
        s = i / max(1, self.length - 1)
        for (s0, p0), (s1, p1) in zip(self.keys, self.keys[1:]):
            if s <= s1:
                pos = _smooth(p0, p1, (s - s0) / max(1e-9, s1 - s0))
                break
        else:
            pos = self.keys[-1][1]
        closed = self.grasp[0] <= s < self.grasp[1]
        opening = 0.032 if closed else 0.06
        return pos, opening, closed and self.success

    def block_position(self, name: str, i: int) -> np.ndarray:
        if name != self.target:
            return self.blocks[name]
        s = i / max(1, self.length - 1)
        size = _BLOCKS[name][1]
        if s < self.grasp[0]:
            return self.blocks[name]
        pos, _, held = self.gripper(i)
        if held:
            return pos + np.array([0, 0, size])
        if s >= self.grasp[1] and self.success:
            return self.place + np.array([0, 0, size])
        return self.blocks[name]

    # cameras ------------------------------------------------------------------------------
    def cameras(self, i: int) -> dict[str, Camera]:
        """All three cameras at frame i of this episode."""
        out = {n: Camera(self.K_ext, R, t, self.width, self.height) for n, (R, t) in self.ext.items()}
        out["wrist_left"] = self.camera("wrist_left", i)
        return out

    def camera(self, role: str, i: int) -> Camera:
        name = camera_name(role)
        if name != "wrist_left":
            R, t = self.ext[name]
            return Camera(self.K_ext, R, t, self.width, self.height)
        g, _, _ = self.gripper(i)
        eye = g + np.array([0.0, -0.1, 0.07])
        R, t = look_at(eye, g + np.array([0.0, 0.12, -0.1]))
        return Camera(self.K_wrist, R, t, self.width, self.height)

    # scene --------------------------------------------------------------------------------
    def _static(self) -> list:
        table = Plane(2, 0.0, "table", 1.0, ((-0.55, 0.55), (-0.4, 0.45)), 500.0)
        floor = Plane(2, -0.7, "floor", 1.0, None, 250.0)
        # the hard scene's wall stands right behind the table (a lab wall with posters): the one
        # large surface both wide-baseline cameras see
        wall = (Plane(1, 0.62, "mat", -1.0, ((-3.0, 3.0), (-0.7, 3.0)), 300.0) if self.style == "hard"
                else Plane(1, 1.2, "wall", -1.0, None, 150.0))
        bowl = Cylinder(self.bowl, 0.07, 0.03, "bowl")
        still = [Box(self.blocks[n], np.full(3, size), n, self.yaws[n]) for n, (_, size) in _BLOCKS.items()
                 if n != self.target]  # blocks the arm never touches
        return [table, floor, wall, bowl, *still]

    def _moving(self, i: int) -> list:
        g, opening, _ = self.gripper(i)
        prims: list = []
        size = _BLOCKS[self.target][1]
        prims.append(Box(self.block_position(self.target, i), np.full(3, size), self.target, self.yaws[self.target]))
        palm_z = g[2] + 0.05
        prims.append(Box(np.array([g[0], g[1], palm_z + 0.012]), np.array([0.055, 0.025, 0.012]), "arm"))
        for sgn in (-1, 1):
            prims.append(Box(np.array([g[0] + sgn * (opening / 2 + 0.006), g[1], g[2] + 0.025]),
                             np.array([0.006, 0.018, 0.025]), "arm"))
        col_lo = palm_z + 0.024
        prims.append(Box(np.array([g[0], g[1], (col_lo + _ARM_TOP) / 2]), np.array([0.022, 0.022, (_ARM_TOP - col_lo) / 2]), "arm"))
        return prims

    def render_view(self, role: str, i: int) -> np.ndarray:
        """HxWx3 uint8 RGB image of camera `role` at frame i."""
        name = camera_name(role)
        cam = self.camera(name, i)
        if name == "wrist_left":
            depth, color = render(cam, self._static(), self.tex)
        else:
            if name not in self._static_cache:
                self._static_cache[name] = render(cam, self._static(), self.tex)
            depth, color = (a.copy() for a in self._static_cache[name])
        render(cam, self._moving(i), self.tex, depth, color)
        img = (np.clip(color, 0, 1) * 255 + 0.5).astype(np.uint8)
        return img.reshape(cam.height, cam.width, 3)

    def render(self, i: int) -> dict[str, np.ndarray]:
        return {n: self.render_view(n, i) for n in CAMERA_NAMES}


_TEX_CACHE: dict[tuple[int, str], dict[str, np.ndarray]] = {}


def _textures(seed: int, style: str = "demo") -> dict[str, np.ndarray]:
    if (seed, style) not in _TEX_CACHE:
        _TEX_CACHE[(seed, style)] = _make_textures(seed, style=style)
    return _TEX_CACHE[(seed, style)]


def demo_episodes(episodes: int = 14, seed: int = 0, height: int = 96, width: int = 160,
                  failed: tuple[int, ...] = (), style: Literal["demo", "hard"] = "demo",
                  length: int | None = None, targets: tuple[str, ...] = (), rig_jitter: float = 0.0,
                  texture_seed: int | None = None,
                  motion: Literal["scripted", "varied"] = "scripted", place_on: str = "bowl") -> list[SyntheticEpisode]:
    """The demo's episodes: lengths 18-36 frames, every fifth one (index 3, 8, 13...) only 9-15;
    `length` gives every episode that many frames instead. `targets` limits the blocks picked (the tasks),
    `rig_jitter` re-places the exterior cameras per episode, `texture_seed` keeps the room of another
    seed (the same textures, other episodes), `motion` "varied" draws the arm's path per episode, and
    `place_on` names where the block goes (the bowl, or another block to stack it on)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(episodes):
        n = int(rng.integers(9, 16)) if i % 5 == 3 else int(rng.integers(18, 37))
        out.append(SyntheticEpisode(i, length or n, seed, height, width, success=i not in failed, style=style,
                                    targets=targets, rig_jitter=rig_jitter, texture_seed=texture_seed,
                                    motion=motion, place_on=place_on))
    return out


# ------------------------------------------------------------------------------------- writing
def _features(height: int, width: int, version: str, codec: str) -> dict:
    vinfo = {"video.height": height, "video.width": width, "video.codec": "h264" if codec == "libx264" else codec,
             "video.pix_fmt": "yuv420p", "video.is_depth_map": False, "video.fps": FPS, "video.channels": 3,
             "has_audio": False}
    feats: dict = {}
    for name in CAMERA_NAMES:
        feats[FEATURE_PREFIX + name] = {"dtype": "video", "shape": [height, width, 3],
                                        "names": ["height", "width", "channels"], "info": vinfo}
    feats["observation.state"] = {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)}
    feats["action"] = {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)}
    feats["is_episode_successful"] = {"dtype": "bool", "shape": [1], "names": None}
    for k in ("timestamp",):
        feats[k] = {"dtype": "float32", "shape": [1], "names": None}
    for k in ("frame_index", "episode_index", "index", "task_index"):
        feats[k] = {"dtype": "int64", "shape": [1], "names": None}
    return feats


def _episode_table(ep: SyntheticEpisode, task_index: int, first_index: int) -> pa.Table:
    states = []
    for i in range(ep.length):
        g, opening, _ = ep.gripper(i)
        states.append([g[0], g[1], g[2], opening])
    st = np.asarray(states, np.float32)
    act = np.concatenate([st[1:], st[-1:]])
    n = ep.length
    return pa.table({
        "observation.state": pa.array(list(st), pa.list_(pa.float32())),
        "action": pa.array(list(act), pa.list_(pa.float32())),
        "is_episode_successful": pa.array([ep.success] * n),
        "timestamp": pa.array(np.arange(n, dtype=np.float32) / FPS),
        "frame_index": pa.array(np.arange(n, dtype=np.int64)),
        "episode_index": pa.array(np.full(n, ep.index, np.int64)),
        "index": pa.array(np.arange(first_index, first_index + n, dtype=np.int64)),
        "task_index": pa.array(np.full(n, task_index, np.int64)),
    })


def _write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def _write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())


def _cameras_json(eps: list[SyntheticEpisode]) -> dict:
    """Camera ground truth for meta/cameras.json (K, and R, t fixed or per frame per episode)."""
    e0 = eps[0]
    cams: dict = {}
    for name in CAMERA_NAMES:
        c0 = e0.camera(name, 0)
        entry = {"role": name, "K": c0.K.tolist(), "width": c0.width, "height": c0.height}
        if name == "wrist_left":
            entry["static"] = False
            entry["episodes"] = {
                str(e.index): {"R": [e.camera(name, i).R.tolist() for i in range(e.length)],
                               "t": [e.camera(name, i).t.tolist() for i in range(e.length)]} for e in eps}
        elif any(e.style == "hard" or e.rig_jitter for e in eps):  # re-placed every episode, fixed within one
            entry["static"] = True
            entry["episodes"] = {str(e.index): {"R": e.camera(name, 0).R.tolist(), "t": e.camera(name, 0).t.tolist()}
                                 for e in eps}
        else:
            entry.update(static=True, R=c0.R.tolist(), t=c0.t.tolist())
        cams[FEATURE_PREFIX + name] = entry
    return {"format": "worldtune.cameras", "version": 1, "fps": FPS,
            "convention": "x_cam = R @ x_world + t; [u, v, 1] ~ K @ x_cam; OpenCV axes (x right, y down, "
                          "z forward); pixel centres at integer coordinates; R, t given once (a rig fixed "
                          "for the whole dataset), per episode (`episodes`: {index: {R, t}}), or per frame "
                          "(`episodes`: {index: {R: [...], t: [...]}} indexed by frame within the episode)",
            "cameras": cams}


def write_demo_dataset(root: str | Path, episodes: int = 14, seed: int = 0,
                       version: Literal["v3.0", "v2.1"] = "v3.0", height: int = 96, width: int = 160,
                       episodes_per_file: int | None = None, failed: tuple[int, ...] = (),
                       codec: str = "libx264", crf: int = 20, preset: str = "veryfast",
                       workers: int = 2, style: Literal["demo", "hard"] = "demo",
                       length: int | None = None, targets: tuple[str, ...] = (), rig_jitter: float = 0.0,
                       texture_seed: int | None = None, motion: Literal["scripted", "varied"] = "scripted",
                       place_on: str = "bowl") -> Path:
    """Render the tabletop demo and write it as a LeRobot v3.0 (default) or v2.1 dataset.

    v3.0: episodes are concatenated, `episodes_per_file` per mp4/parquet file (None = all in one).
    `failed` episode indices get `is_episode_successful = False` (the arm misses the grasp).
    `style` "hard" renders the low-texture, wide-baseline scene; `length` fixes every episode's
    length; `motion` "varied" draws each episode's path; `place_on` is where the block goes (the bowl or
    another block). Returns the dataset root. Writes
    `meta/cameras.json` with the true cameras. Episodes are rendered in `workers` processes (the
    default 14 episodes at 96x160 take a few seconds).
    """
    root = Path(root)
    eps = demo_episodes(episodes, seed, height, width, failed, style, length, targets, rig_jitter, texture_seed,
                        motion, place_on)
    tasks: dict[str, int] = {}
    for e in eps:
        tasks.setdefault(e.task, len(tasks))
    per_file = episodes_per_file or max(1, len(eps))
    info = {
        "codebase_version": version, "robot_type": ROBOT_TYPE,
        "total_episodes": len(eps), "total_frames": sum(e.length for e in eps), "total_tasks": len(tasks),
        "chunks_size": 1000, "fps": FPS, "splits": {"train": f"0:{len(eps)}"},
        "features": _features(height, width, version, codec),
    }
    if version == "v3.0":
        info.update(data_files_size_in_mb=100, video_files_size_in_mb=500,
                    data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                    video_path="videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4")
        _write_v3(root, eps, tasks, per_file, codec, crf, preset, workers)
    elif version == "v2.1":
        info.update(total_chunks=1, total_videos=len(eps) * len(CAMERA_NAMES),
                    data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
                    video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
        _write_v21(root, eps, tasks, codec, crf, preset, workers)
    else:
        raise ValueError(f"version must be 'v3.0' or 'v2.1', got {version!r}")
    _write_json(root / "meta" / "cameras.json", _cameras_json(eps))
    _write_json(root / "meta" / "info.json", info)
    return root


def _render_episode(e: SyntheticEpisode) -> list[dict[str, np.ndarray]]:
    return [e.render(i) for i in range(e.length)]


def _rendered(eps: list[SyntheticEpisode], workers: int) -> Iterator[tuple[SyntheticEpisode, list]]:
    """(episode, frames) in order, rendered in worker processes when workers > 1."""
    if workers <= 1 or len(eps) <= 1:
        for e in eps:
            yield e, _render_episode(e)
        return
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(min(workers, len(eps))) as pool:
        yield from zip(eps, pool.imap(_render_episode, eps))


def _write_v3(root: Path, eps: list[SyntheticEpisode], tasks: dict[str, int], per_file: int,
              codec: str, crf: int, preset: str, workers: int) -> None:
    rows: list[dict] = []
    index = 0
    frames_of = _rendered(eps, workers)
    for f, start in enumerate(range(0, len(eps), per_file)):
        group = eps[start:start + per_file]
        writers = {n: VideoWriter(root / "videos" / (FEATURE_PREFIX + n) / "chunk-000" / f"file-{f:03d}.mp4",
                                  FPS, codec=codec, crf=crf, preset=preset, gop=FPS) for n in CAMERA_NAMES}
        tables = []
        offset = 0
        try:
            for _ in group:
                e, frames = next(frames_of)
                for views in frames:
                    for n, img in views.items():
                        writers[n].write(img)
                tables.append(_episode_table(e, tasks[e.task], index))
                row = {"episode_index": e.index, "tasks": [e.task], "length": e.length,
                       "dataset_from_index": index, "dataset_to_index": index + e.length,
                       "data/chunk_index": 0, "data/file_index": f,
                       "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
                for n in CAMERA_NAMES:
                    k = f"videos/{FEATURE_PREFIX}{n}/"
                    row.update({k + "chunk_index": 0, k + "file_index": f,
                                k + "from_timestamp": offset / FPS, k + "to_timestamp": (offset + e.length) / FPS})
                rows.append(row)
                offset += e.length
                index += e.length
            for w in writers.values():
                w.close()
        except BaseException:
            for w in writers.values():
                w.abort()
            raise
        _write_parquet(root / "data" / "chunk-000" / f"file-{f:03d}.parquet", pa.concat_tables(tables))
    _write_parquet(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet", pa.Table.from_pylist(rows))
    _write_parquet(root / "meta" / "tasks.parquet",
                   pa.table({"task_index": list(tasks.values()), "task": list(tasks.keys())}))


def _write_v21(root: Path, eps: list[SyntheticEpisode], tasks: dict[str, int], codec: str, crf: int,
               preset: str, workers: int) -> None:
    index = 0
    lines = []
    for e, frames in _rendered(eps, workers):
        for n in CAMERA_NAMES:
            with VideoWriter(root / "videos" / "chunk-000" / (FEATURE_PREFIX + n) / f"episode_{e.index:06d}.mp4",
                             FPS, codec=codec, crf=crf, preset=preset) as w:
                for fr in frames:
                    w.write(fr[n])
        _write_parquet(root / "data" / "chunk-000" / f"episode_{e.index:06d}.parquet",
                       _episode_table(e, tasks[e.task], index))
        index += e.length
        lines.append(json.dumps({"episode_index": e.index, "tasks": [e.task], "length": e.length}))
    atomic_write_bytes(root / "meta" / "episodes.jsonl", ("\n".join(lines) + "\n").encode())
    atomic_write_bytes(root / "meta" / "tasks.jsonl", "".join(
        json.dumps({"task_index": i, "task": t}) + "\n" for t, i in tasks.items()).encode())


def iter_demo_frames(episode: SyntheticEpisode) -> Iterator[dict[str, np.ndarray]]:
    """Every frame of an episode as {camera name: HxWx3}."""
    for i in range(episode.length):
        yield episode.render(i)
