"""The demo scene's episodes: a procedurally rendered tabletop, written as a LeRobot dataset by worldtune.scene.writer.

Why: the demo and the tests need a multi-camera robot dataset with no download, and the
evaluation's geometry metrics need ground truth. Every pixel here is an exact pinhole projection
(worldtune.scene.raycast: one ray per pixel centre, intersected with textured planes, boxes and a
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

from dataclasses import dataclass, field
from typing import Iterator, Literal

import cv2
import numpy as np

from worldtune.scene.raycast import Box, Camera, Cylinder, Plane, intrinsics, look_at, render

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


def _make_textures(seed: int, size: int = 256, style: str = "demo", arm: str = "grey") -> dict[str, np.ndarray]:
    """Float32 RGB textures in [0,1]: rich in blobs and corners so SIFT finds keypoints ("demo"),
    or a plain table and a faint wall ("hard"); the arm grey (`arm` "grey") or near black ("bold")."""
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
                      ("bowl", (0.9, 0.8, 0.25)), ("arm", ARM_COLOURS[arm])):
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
_BLOCKS = {"red": ("cube", 0.025), "blue": ("cube", 0.025), "green": ("block", 0.02)}  # name: (shape, half size m)
_ARM_TOP = 0.75
# The arm's look. "grey" is the classic scene's: a grey arm that reads 13 levels per channel from the wall and table
# behind it (the seeds' 64x112 views then lose it in the latents). "bold" is near black and thicker, so that a
# small model's view resolves it: arm colour, then half widths (m) of the column, the palm (x, y, z) and a finger.
ARM_COLOURS = {"grey": (0.6, 0.6, 0.65), "bold": (0.16, 0.15, 0.2)}
ARM_SIZES = {"grey": (0.022, (0.055, 0.025, 0.012), (0.006, 0.018, 0.025)),
             "bold": (0.032, (0.06, 0.032, 0.016), (0.01, 0.022, 0.025))}
ArmLook = Literal["grey", "bold"]
HOME = (0.0, -0.05, 0.35)  # where the scripted path starts
OPEN, CLOSED = 0.06, 0.032  # the gripper's opening (m): released, and closed on a block
BOWL_RADIUS, BOWL_HEIGHT = 0.07, 0.03  # the shallow bowl: a block let go over it rests on its floor at this height


def _smooth(a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    s = min(1.0, max(0.0, s))
    s = s * s * (3 - 2 * s)
    return a + (b - a) * s


Keys = list[tuple[float, np.ndarray]]  # (fraction of the episode, gripper position), increasing fractions


def _scripted_keys(ep: "SyntheticEpisode") -> tuple[Keys, tuple[float, float]]:
    return scripted_keys(ep.blocks[ep.target], ep.place)


def scripted_keys(block: np.ndarray, place: np.ndarray) -> tuple[Keys, tuple[float, float]]:
    """The one script: home, above the block, down, grasp, up, over where it goes, down, release, up, each at a
    fixed fraction of the episode. Keys and the (close, release) fractions of the grasp. `block` is the block's
    centre, `place` where its bottom is let go (the scripted expert of worldtune.scene.policies follows it too)."""
    blk = block
    home = np.array(HOME)
    above_b, at_b = np.array([blk[0], blk[1], 0.2]), np.array([blk[0], blk[1], 0.0])
    above_w, at_w = np.array([place[0], place[1], 0.2]), np.asarray(place, float).copy()
    return [(0.0, home), (0.3, above_b), (0.42, at_b), (0.5, at_b), (0.6, above_b), (0.8, above_w),
            (0.88, at_w), (0.93, at_w), (1.0, above_w)], (0.46, 0.9)


def _varied_keys(ep: "SyntheticEpisode", rng: np.random.Generator,
                 start: np.ndarray | None = None) -> tuple[Keys, tuple[float, float]]:
    """The same task with a path drawn per episode, as teleoperated demonstrations differ: the start, a detour
    over the table on the way to the block (most episodes) and to the bowl (some), approach and lift heights,
    each move's speed and pauses on the way. Neither the first frame nor the instruction tells which, only the
    robot's actions do: what a forward-dynamics model must read them for. `start` replaces the drawn start (the
    rest of the path is drawn as before)."""
    blk = ep.blocks[ep.target]

    def over_table(lo: float, hi: float) -> np.ndarray:
        return np.array([rng.uniform(-0.35, 0.35), rng.uniform(-0.22, 0.22), rng.uniform(lo, hi)])

    h_b, h_w = rng.uniform(0.1, 0.26), rng.uniform(0.1, 0.26)
    above_b, at_b = np.array([blk[0], blk[1], h_b]), np.array([blk[0], blk[1], 0.0])
    above_w, at_w = np.array([ep.place[0], ep.place[1], h_w]), ep.place.copy()
    drawn_start = over_table(0.25, 0.4)
    moves: list[tuple[str, np.ndarray]] = [("start", drawn_start if start is None else start)]
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


def path_at(keys: Keys, grasp: tuple[float, float], i: int, length: int) -> tuple[np.ndarray, float, bool]:
    """Frame i of `length` along a keyframe path: the gripper's position, its opening, and whether it is closed."""
    s = i / max(1, length - 1)
    for (s0, p0), (s1, p1) in zip(keys, keys[1:]):
        if s <= s1:
            pos = _smooth(p0, p1, (s - s0) / max(1e-9, s1 - s0))
            break
    else:
        pos = keys[-1][1]
    closed = grasp[0] <= s < grasp[1]
    return pos, (CLOSED if closed else OPEN), closed


def block_size(name: str) -> float:
    """Half the edge of the block `name` (m)."""
    return _BLOCKS[name][1]


def block_shape(name: str) -> str:
    """What the task calls the block `name`: "cube" or "block"."""
    return _BLOCKS[name][0]


BLOCK_NAMES: tuple[str, ...] = tuple(_BLOCKS)


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
    layout_of: int | None = None  # share this episode index's layout, cameras and start; draw only the path anew
    arm: ArmLook = "grey"  # the arm's look: the classic grey one, or a near-black thicker one ("bold")
    blocks: dict[str, np.ndarray] = field(default_factory=dict)
    target: str = ""
    bowl: np.ndarray = field(default_factory=lambda: np.zeros(3))
    place: np.ndarray = field(default_factory=lambda: np.zeros(3))  # where the block's bottom is let go
    _static_cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        layout = self.index if self.layout_of is None else self.layout_of
        rng = np.random.default_rng([self.seed, layout])
        if self.arm not in ARM_COLOURS:
            raise ValueError(f"arm {self.arm!r}: use one of {', '.join(ARM_COLOURS)}")
        self.tex = _textures(self.seed if self.texture_seed is None else self.texture_seed, self.style, self.arm)
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
        self.keys, self.grasp = self._keys(layout)
        self.K_ext = intrinsics(self.width, self.height, 62.0)
        self.K_wrist = intrinsics(self.width, self.height, 90.0)
        if self.style == "hard":  # ~80° apart, re-placed by a few cm and degrees every episode
            jitter = np.random.default_rng([self.seed, layout, 7])
            eyes = {"exterior_1_left": [-0.62, -0.45, 0.60], "exterior_2_left": [0.62, -0.45, 0.58]}
            self.ext = {n: look_at(np.array(e) + jitter.uniform(-0.03, 0.03, 3),
                                   np.array([0.0, 0.02, 0.04]) + jitter.uniform(-0.03, 0.03, 3)) for n, e in eyes.items()}
        else:
            jitter = np.random.default_rng([self.seed, layout, 7])
            j = self.rig_jitter
            eyes = {"exterior_1_left": ([-0.42, -0.62, 0.42], [0.0, 0.02, 0.04]),
                    "exterior_2_left": ([0.45, -0.58, 0.38], [0.0, 0.04, 0.04])}
            self.ext = {n: look_at(np.array(e) + (jitter.uniform(-j, j, 3) if j else 0.0),
                                   np.array(c) + (jitter.uniform(-j, j, 3) if j else 0.0)) for n, (e, c) in eyes.items()}

    def _keys(self, layout: int) -> tuple[Keys, tuple[float, float]]:
        """The arm's keyframes and grasp fractions: the script, or a path drawn from the episode's seed (starting
        where the `layout` episode starts, when this one shares another's layout)."""
        if self.motion != "varied":
            return _scripted_keys(self)
        start = None
        if layout != self.index:
            start = _varied_keys(self, np.random.default_rng([self.seed, layout, 11]))[0][0][1]
        return _varied_keys(self, np.random.default_rng([self.seed, self.index, 11]), start)

    def _place(self) -> np.ndarray:
        """Where the carried block's bottom is let go: on the bowl's floor, or on top of the block `place_on`."""
        if self.place_on == "bowl":
            return np.array([self.bowl[0], self.bowl[1], BOWL_HEIGHT])
        if self.place_on not in _BLOCKS or self.place_on == self.target:
            raise ValueError(f"place_on '{self.place_on}' is not a place for the {self.target} block: 'bowl' or "
                             f"another block ({', '.join(n for n in _BLOCKS if n != self.target)})")
        under = self.blocks[self.place_on]
        return np.array([under[0], under[1], 2 * _BLOCKS[self.place_on][1]])

    # trajectory ---------------------------------------------------------------------------
    def gripper(self, i: int) -> tuple[np.ndarray, float, bool]:
        """Gripper position (bottom of the fingers), opening in metres, and whether it holds the block."""
        pos, opening, closed = path_at(self.keys, self.grasp, i, self.length)
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
        return self.camera_at(role, self.gripper(i)[0])

    def camera_at(self, role: str, gripper: np.ndarray) -> Camera:
        """Camera `role` with the gripper at `gripper` (the wrist camera rides on it; the others stand still)."""
        name = camera_name(role)
        if name != "wrist_left":
            R, t = self.ext[name]
            return Camera(self.K_ext, R, t, self.width, self.height)
        g = gripper
        eye = g + np.array([0.0, -0.1, 0.07])
        R, t = look_at(eye, g + np.array([0.0, 0.12, -0.1]))
        return Camera(self.K_wrist, R, t, self.width, self.height)

    # scene --------------------------------------------------------------------------------
    def _static(self, still: tuple[str, ...] | None = None) -> list:
        """What does not move: table, floor, wall, bowl and the blocks `still` (None: all but the target)."""
        table = Plane(2, 0.0, "table", 1.0, ((-0.55, 0.55), (-0.4, 0.45)), 500.0)
        floor = Plane(2, -0.7, "floor", 1.0, None, 250.0)
        # the hard scene's wall stands right behind the table (a lab wall with posters): the one
        # large surface both wide-baseline cameras see
        wall = (Plane(1, 0.62, "mat", -1.0, ((-3.0, 3.0), (-0.7, 3.0)), 300.0) if self.style == "hard"
                else Plane(1, 1.2, "wall", -1.0, None, 150.0))
        bowl = Cylinder(self.bowl, BOWL_RADIUS, BOWL_HEIGHT, "bowl")
        if still is None:
            still = tuple(n for n in _BLOCKS if n != self.target)  # blocks the arm never touches
        blocks = [Box(self.blocks[n], np.full(3, size), n, self.yaws[n]) for n, (_, size) in _BLOCKS.items()
                  if n in still]
        return [table, floor, wall, bowl, *blocks]

    def _moving(self, i: int) -> list:
        """What moves at frame i: the target block, then the arm."""
        g, opening, _ = self.gripper(i)
        return self._moving_at(g, opening, {self.target: self.block_position(self.target, i)})

    def _moving_at(self, g: np.ndarray, opening: float, blocks: dict[str, np.ndarray]) -> list:
        """The arm with the gripper at `g`, open `opening` m, and the blocks that move at their centres `blocks`."""
        prims: list = [Box(pos, np.full(3, _BLOCKS[n][1]), n, self.yaws[n]) for n, pos in blocks.items()]
        column, palm, finger = ARM_SIZES[self.arm]
        palm_z = g[2] + 0.05
        prims.append(Box(np.array([g[0], g[1], palm_z + palm[2]]), np.array(palm), "arm"))
        for sgn in (-1, 1):
            prims.append(Box(np.array([g[0] + sgn * (opening / 2 + finger[0]), g[1], g[2] + finger[2]]),
                             np.array(finger), "arm"))
        col_lo = palm_z + 2 * palm[2]
        prims.append(Box(np.array([g[0], g[1], (col_lo + _ARM_TOP) / 2]), np.array([column, column, (_ARM_TOP - col_lo) / 2]), "arm"))
        return prims

    def render_view(self, role: str, i: int) -> np.ndarray:
        """HxWx3 uint8 RGB image of camera `role` at frame i."""
        g, opening, _ = self.gripper(i)
        return self.render_state(role, g, opening, {self.target: self.block_position(self.target, i)})

    def render_state(self, role: str, gripper: np.ndarray, opening: float, moving: dict[str, np.ndarray],
                     still: tuple[str, ...] | None = None) -> np.ndarray:
        """HxWx3 uint8 RGB image of camera `role` with the gripper at `gripper`, open `opening` m, the blocks
        `moving` at the centres given, and the blocks `still` (None: all but the target) where they started.
        The dataset's frames and the simulator's (worldtune.scene.sim) both come from here, so one state draws
        one image. The still part of an exterior view is drawn once per set of still blocks."""
        name = camera_name(role)
        cam = self.camera_at(name, gripper)
        if name == "wrist_left":
            depth, color = render(cam, self._static(still), self.tex)
        else:
            key = name if still is None else (name, still)
            if key not in self._static_cache:
                self._static_cache[key] = render(cam, self._static(still), self.tex)
            depth, color = (a.copy() for a in self._static_cache[key])
        render(cam, self._moving_at(gripper, opening, moving), self.tex, depth, color)
        img = (np.clip(color, 0, 1) * 255 + 0.5).astype(np.uint8)
        return img.reshape(cam.height, cam.width, 3)

    def render(self, i: int) -> dict[str, np.ndarray]:
        return {n: self.render_view(n, i) for n in CAMERA_NAMES}


_TEX_CACHE: dict[tuple[int, str, str], dict[str, np.ndarray]] = {}


def _textures(seed: int, style: str = "demo", arm: str = "grey") -> dict[str, np.ndarray]:
    if (seed, style, arm) not in _TEX_CACHE:
        _TEX_CACHE[(seed, style, arm)] = _make_textures(seed, style=style, arm=arm)
    return _TEX_CACHE[(seed, style, arm)]


def demo_episodes(episodes: int = 14, seed: int = 0, height: int = 96, width: int = 160,
                  failed: tuple[int, ...] = (), style: Literal["demo", "hard"] = "demo",
                  length: int | None = None, targets: tuple[str, ...] = (), rig_jitter: float = 0.0,
                  texture_seed: int | None = None,
                  motion: Literal["scripted", "varied"] = "scripted", place_on: str = "bowl",
                  layout_of: int | None = None, arm: ArmLook = "grey") -> list[SyntheticEpisode]:
    """The demo's episodes: lengths 18-36 frames, every fifth one (index 3, 8, 13...) only 9-15;
    `length` gives every episode that many frames instead. `targets` limits the blocks picked (the tasks),
    `rig_jitter` re-places the exterior cameras per episode, `texture_seed` keeps the room of another
    seed (the same textures, other episodes), `motion` "varied" draws the arm's path per episode, and
    `place_on` names where the block goes (the bowl, or another block to stack it on). `layout_of` gives every
    episode that episode's layout, cameras and start, so that only their paths differ; `arm` is the arm's look."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(episodes):
        n = int(rng.integers(9, 16)) if i % 5 == 3 else int(rng.integers(18, 37))
        out.append(SyntheticEpisode(i, length or n, seed, height, width, success=i not in failed, style=style,
                                    targets=targets, rig_jitter=rig_jitter, texture_seed=texture_seed,
                                    motion=motion, place_on=place_on, layout_of=layout_of, arm=arm))
    return out


def iter_demo_frames(episode: SyntheticEpisode) -> Iterator[dict[str, np.ndarray]]:
    """Every frame of an episode as {camera name: HxWx3}."""
    for i in range(episode.length):
        yield episode.render(i)
