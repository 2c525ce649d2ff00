"""The scene as a closed-loop simulator: `SceneEnv.reset(task=, seed=)` / `step(action)`, gymnasium's API.

Why: the scene knows the truth (where every block is, which camera sees what), so a policy rolled out here has
a true success rate; a world model's verdicts on the same policies can be checked against it.

The action is the robot's own, as the scene's datasets record `action`: the gripper's next position and
opening, [x, y, z, gripper] in metres (worldtune.scene.episode.ACTION_NAMES); it is clipped to the workspace.
The rules, applied after each move:

- grasp: a gripper that closes (its opening drops below `GRIP_CLOSED_BELOW`) with a block within reach (the
  block's centre within `REACH_XY` of the gripper, seen from above, and the fingers' bottom no higher than the
  block's middle nor more than 1 cm under its bottom) holds the nearest such block, centred between the fingers.
  A block with another on top of it is not picked.
- carry: a held block moves with the gripper.
- release: a gripper that opens lets its block fall straight down onto what is below its centre: the top of
  another block whose footprint holds that point, else the bowl's floor (within the bowl's radius), else the
  table, else the floor.
- success: the task's block rests (not held) in the bowl, or on the named block.

The observation is {"state": [x, y, z, gripper] float32 (the dataset's observation.state), camera: HxWx3 uint8
for each camera in `cameras`}; leave `cameras` empty to roll out without drawing (cheap), and draw the views
you need with `render_views`. Frames come from the same drawing code as the dataset writer's
(`SyntheticEpisode.render_state`), so a written episode's actions replayed here draw the same pixels. The
reward is 1.0 on a step that ends with the task done, else 0.0; episodes are never `terminated` (the task has
no failing end) and are `truncated` after `max_steps` steps. It is a `gymnasium.Env` when gymnasium is
installed (the `sim` extra); without it, the same methods and attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from worldtune.errors import ConfigError
from worldtune.scene.episode import (BLOCK_NAMES, BOWL_HEIGHT, BOWL_RADIUS, CAMERA_NAMES, HOME, OPEN,
                                     SyntheticEpisode, block_size, camera_name)
from worldtune.scene.raycast import Camera
from worldtune.scene.task import SceneTask

try:  # a gymnasium.Env when gymnasium is there, so its wrappers and checks accept it
    import gymnasium

    _Base: type = gymnasium.Env
except ImportError:  # duck-typed: the same methods and attributes
    _Base = object

GRIP_CLOSED_BELOW = 0.046  # m: an opening under this is a closed gripper (the dataset's are 0.032 and 0.06)
REACH_XY = 0.02  # m: how far from the block's centre (seen from above) a closing gripper still takes it
TABLE = ((-0.55, 0.55), (-0.4, 0.45))  # the table's extent in x and y (m); its top is z = 0
FLOOR_Z = -0.7
WORKSPACE_LOW = np.array([-0.6, -0.45, 0.0, 0.0])  # the action's bounds: x, y, z (m), opening (m)
WORKSPACE_HIGH = np.array([0.6, 0.5, 0.5, 0.08])


@dataclass
class SceneState:
    """Where everything is: the gripper, each block's centre, what each block rests on, which one is held."""

    gripper: np.ndarray
    opening: float
    blocks: dict[str, np.ndarray]
    support: dict[str, str]  # block: "table", "bowl", "floor", another block's name, or "gripper"
    held: str | None = None
    moved: set[str] = field(default_factory=set)  # blocks that have left where they started

    @property
    def closed(self) -> bool:
        return self.opening < GRIP_CLOSED_BELOW


START_FACTS = ("task", "instruction", "blocks", "bowl", "yaws", "max_steps")  # what a policy may know of a start


def start_facts(info: dict[str, Any]) -> dict[str, Any]:
    """What the scripted policies read of an episode's start (the layout, the task, the horizon), from a reset's
    `info`: handed to `WorldModelEnv.reset(options={"facts": ...})`, so a policy rolled out in a world model from
    the simulator's first frames knows what it knew in the simulator, and no more (not the outcome)."""
    return {k: info[k] for k in START_FACTS}


def task_done(state: SceneState, task: SceneTask) -> bool:
    """The simulator's success predicate: the task's block rests, not held, in the bowl or on the named block."""
    return state.held != task.target and state.support[task.target] == task.place_on


class SceneEnv(_Base):  # type: ignore[misc, valid-type]
    """The scene as an environment: a layout per seed (that of `demo_episodes(seed=scene_seed)`'s episode of
    that index), a task per reset, the rules of grasp, carry and release."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, cameras: tuple[str, ...] = CAMERA_NAMES, height: int = 96, width: int = 160,
                 max_steps: int = 30, scene_seed: int = 0, style: Literal["demo", "hard"] = "demo") -> None:
        self.cameras = tuple(camera_name(c) for c in cameras)
        self.height, self.width, self.max_steps = height, width, max_steps
        self.scene_seed, self.style = scene_seed, style
        self.layout: SyntheticEpisode | None = None
        self.state: SceneState | None = None
        self.task: SceneTask | None = None
        self.steps = 0
        self._next = 0  # the layout a reset without a seed takes: the one after the last
        self._spaces()

    # gymnasium API ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None,
              task: SceneTask | str | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Lay out the scene of `seed` (blocks, bowl, cameras; None: the layout after the last one, from 0) and
        start `task` (a SceneTask or its instruction; also taken from options["task"] or options["instruction"],
        the key `WorldModelEnv` reads too, so one options dict starts both; None: the block that layout's dataset
        episode picks, into the bowl). options["gripper"] = [x, y, z, opening] starts the gripper elsewhere than
        home."""
        options = options or {}
        task = next((t for t in (task, options.get("task"), options.get("instruction")) if t is not None), None)
        index = self._next if seed is None else int(seed)
        self._next = index + 1
        if _Base is not object:
            super().reset(seed=seed)  # gymnasium's own seeding (self.np_random)
        targets = (SceneTask.parse(task).target,) if task is not None else ()
        self.layout = SyntheticEpisode(index, self.max_steps + 1, self.scene_seed, self.height, self.width,
                                       style=self.style, targets=targets)
        self.task = SceneTask.parse(task) if task is not None else SceneTask(self.layout.target)
        start = np.asarray(options.get("gripper", [*HOME, OPEN]), np.float64).reshape(-1)
        if start.shape != (4,) or not np.isfinite(start).all():
            raise ConfigError(f"SceneEnv.reset: options['gripper'] must be 4 finite numbers [x, y, z, gripper], got "
                              f"{start.tolist()}")
        blocks = {n: self.layout.blocks[n].copy() for n in BLOCK_NAMES}
        self.state = SceneState(start[:3].copy(), float(start[3]), blocks, {n: "table" for n in BLOCK_NAMES})
        self.steps = 0
        return self._observe(), self._info()

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Move the gripper to `action` = [x, y, z, opening], then grasp, carry or release by the rules. A chunk
        [K, 4] (what a served world model takes in one step) is applied action by action, up to `max_steps`; the
        observation is then the state after its last action."""
        self._require("step")
        a = np.asarray(action, np.float64)
        chunk = a.reshape(1, -1) if a.ndim == 1 else a
        if chunk.ndim != 2 or chunk.shape[1:] != (4,) or not len(chunk) or not np.isfinite(chunk).all():
            raise ConfigError(f"SceneEnv.step: the action must be 4 finite numbers [x, y, z, gripper] (or a chunk "
                              f"[K, 4] of them), got {np.asarray(action).tolist()}")
        for one in chunk[:max(1, self.max_steps - self.steps)]:
            apply_action(self.state, np.clip(one, WORKSPACE_LOW, WORKSPACE_HIGH), self.layout)
            self.steps += 1
        done = task_done(self.state, self.task)
        return self._observe(), float(done), False, self.steps >= self.max_steps, self._info()

    def close(self) -> None:
        self.layout = self.state = None

    # drawing ------------------------------------------------------------------------------
    def render_views(self, cameras: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """The views `cameras` (None: the env's) of the current state, {camera: HxWx3 uint8}."""
        self._require("render_views")
        st, ep = self.state, self.layout
        moving = [self.task.target] + sorted(st.moved - {self.task.target}, key=BLOCK_NAMES.index)
        still = tuple(n for n in BLOCK_NAMES if n not in moving)
        blocks = {n: st.blocks[n] for n in moving}
        names = self.cameras if cameras is None else tuple(camera_name(c) for c in cameras)
        return {n: ep.render_state(n, st.gripper, st.opening, blocks, still) for n in names}

    def camera_models(self) -> dict[str, Camera]:
        """The exterior cameras of this layout (the wrist one moves with the gripper), for the success detector."""
        self._require("camera_models")
        return {n: self.layout.camera_at(n, self.state.gripper) for n in CAMERA_NAMES if n != "wrist_left"}

    # internals ----------------------------------------------------------------------------
    def _require(self, what: str) -> None:
        if self.state is None:
            raise ConfigError(f"SceneEnv.{what} before reset: call env.reset(task=..., seed=...) first")

    def _observe(self) -> dict[str, np.ndarray]:
        st = self.state
        obs = {"state": np.array([*st.gripper, st.opening], np.float32)}
        obs.update(self.render_views())
        return obs

    def _info(self) -> dict[str, Any]:
        st = self.state
        return {"task": self.task, "instruction": self.task.instruction, "success": task_done(st, self.task),
                "held": st.held, "support": dict(st.support), "step": self.steps, "max_steps": self.max_steps,
                "blocks": {n: p.copy() for n, p in st.blocks.items()}, "bowl": self.layout.bowl.copy(),
                "yaws": dict(self.layout.yaws)}

    def _spaces(self) -> None:
        """gymnasium spaces when gymnasium is installed."""
        if _Base is object:
            return
        from gymnasium import spaces

        self.action_space = spaces.Box(WORKSPACE_LOW.astype(np.float32), WORKSPACE_HIGH.astype(np.float32),
                                       (4,), np.float32)
        views = {c: spaces.Box(0, 255, (self.height, self.width, 3), np.uint8) for c in self.cameras}
        state = spaces.Box(WORKSPACE_LOW.astype(np.float32), WORKSPACE_HIGH.astype(np.float32), (4,), np.float32)
        self.observation_space = spaces.Dict({"state": state, **views})


def apply_action(st: SceneState, a: np.ndarray, layout: SyntheticEpisode) -> None:
    """One step of the rules: move, then grasp (on closing), carry (while held) or release (on opening)."""
    was_closed = st.closed
    st.gripper, st.opening = a[:3].copy(), float(a[3])
    if st.held is not None:
        if st.closed:
            st.blocks[st.held] = st.gripper + np.array([0, 0, block_size(st.held)])
        else:
            _release(st, layout)
    elif st.closed and not was_closed:
        name = _within_reach(st)
        if name is not None:
            st.held, st.support[name] = name, "gripper"
            st.moved.add(name)
            st.blocks[name] = st.gripper + np.array([0, 0, block_size(name)])


def _within_reach(st: SceneState) -> str | None:
    """The block a closing gripper takes: the nearest (seen from above) within reach with nothing on top."""
    best, best_d = None, REACH_XY
    for n, c in st.blocks.items():
        if any(s == n for s in st.support.values()):
            continue  # another block rests on it
        d = float(np.hypot(*(c[:2] - st.gripper[:2])))
        bottom = c[2] - block_size(n)
        if d <= best_d and bottom - 0.01 <= st.gripper[2] <= bottom + block_size(n):
            best, best_d = n, d
    return best


def _release(st: SceneState, layout: SyntheticEpisode) -> None:
    """The held block falls straight down onto what is below its centre."""
    name, st.held = st.held, None
    x, y = st.gripper[0], st.gripper[1]
    surface, support = _surface_below(st, layout, name, x, y)
    st.blocks[name] = np.array([x, y, surface]) + np.array([0, 0, block_size(name)])
    st.support[name] = support


def _surface_below(st: SceneState, layout: SyntheticEpisode, name: str, x: float, y: float) -> tuple[float, str]:
    """(height, what) of the highest surface under (x, y): a block's top, the bowl's floor, the table, the floor."""
    best: tuple[float, str] | None = None
    for other, c in st.blocks.items():
        if other == name or st.support[other] == "gripper":
            continue
        cs, sn = np.cos(layout.yaws[other]), np.sin(layout.yaws[other])
        dx, dy = x - c[0], y - c[1]
        half = block_size(other)
        if abs(cs * dx + sn * dy) <= half and abs(-sn * dx + cs * dy) <= half:  # in the block's own axes
            top = c[2] + half
            if best is None or top > best[0]:
                best = (top, other)
    if best is not None:
        return best
    if np.hypot(x - layout.bowl[0], y - layout.bowl[1]) <= BOWL_RADIUS:
        return BOWL_HEIGHT, "bowl"
    if TABLE[0][0] <= x <= TABLE[0][1] and TABLE[1][0] <= y <= TABLE[1][1]:
        return 0.0, "table"
    return FLOOR_Z, "floor"
