"""Scripted policies of graded skill for the scene's simulator, and a rollout loop.

Why: to check how far a world model's verdicts on policies can be trusted, one needs policies whose true
success rates differ and are known; these are cheap, reproducible and span the range from always to never.

Every policy follows the scene's own script (worldtune.scene.episode.scripted_keys: above the block, down,
close, up, over the place, down, open, up, at fixed fractions of the episode), read from the layout the
simulator gives in `info` (where the blocks and the bowl are): the scripted policies see the state, not the
pixels. They differ in how they spoil it:

- `expert`: the script itself.
- `noisy-<sigma>`: the script with Gaussian noise of `sigma` metres on every commanded position.
- `late-gripper`: the fingers act `lag` steps after the script says (0 to `max_lag`, drawn per episode), so a
  late close finds the block already left behind.
- `early-release`: opens somewhere along the carry (drawn per episode), so the block falls where the arm is.
- `wrong-block`: carries another block than the task's.
- `random`: a random position and opening every step.

A policy's randomness is drawn from the episode's seed and the policy's name, so a rollout is reproducible.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from worldtune.scene.episode import BLOCK_NAMES, BOWL_HEIGHT, CLOSED, OPEN, block_size, path_at, scripted_keys
from worldtune.scene.sim import WORKSPACE_HIGH, WORKSPACE_LOW, SceneEnv
from worldtune.scene.task import SceneTask


class Policy(Protocol):
    """What the rollout loop drives: `reset` at the start of an episode, then `act` once a step."""

    name: str

    def reset(self, task: SceneTask, info: dict[str, Any], rng: np.random.Generator) -> None: ...

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> np.ndarray: ...


def place_of(task: SceneTask, info: dict[str, Any]) -> np.ndarray:
    """Where the task's block is let go (its bottom): on the bowl's floor, or on top of the named block."""
    if task.place_on == "bowl":
        bowl = info["bowl"]
        return np.array([bowl[0], bowl[1], BOWL_HEIGHT])
    under = info["blocks"][task.place_on]
    return np.array([under[0], under[1], under[2] + block_size(task.place_on)])


@dataclass
class Scripted:
    """The scene's script for the task's block (or `carry`, another block) to the task's place."""

    name: str = "expert"
    keys: list = field(default_factory=list, repr=False)
    grasp: tuple[float, float] = (0.46, 0.9)
    length: int = 0

    def reset(self, task: SceneTask, info: dict[str, Any], rng: np.random.Generator) -> None:
        self.keys, self.grasp = scripted_keys(info["blocks"][self.carry(task, rng)], place_of(task, info))
        self.length = info["max_steps"] + 1

    def carry(self, task: SceneTask, rng: np.random.Generator) -> str:
        """The block this policy goes for."""
        return task.target

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> np.ndarray:
        pos, opening, _ = path_at(self.keys, self.grasp, info["step"] + 1, self.length)
        return np.array([*pos, opening])


@dataclass
class Noisy(Scripted):
    """The script with Gaussian noise of `sigma` m on each commanded x, y, z."""

    sigma: float = 0.01
    rng: np.random.Generator | None = field(default=None, repr=False)

    def reset(self, task: SceneTask, info: dict[str, Any], rng: np.random.Generator) -> None:
        super().reset(task, info, rng)
        self.rng = rng

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> np.ndarray:
        a = super().act(obs, info)
        a[:3] += self.rng.normal(0.0, self.sigma, 3)
        return a


@dataclass
class LateGripper(Scripted):
    """The script with the fingers acting `lag` steps late (drawn per episode from 0 to `max_lag`)."""

    max_lag: int = 4
    lag: int = 0

    def reset(self, task: SceneTask, info: dict[str, Any], rng: np.random.Generator) -> None:
        super().reset(task, info, rng)
        self.lag = int(rng.integers(self.max_lag + 1))

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> np.ndarray:
        a = super().act(obs, info)
        _, a[3], _ = path_at(self.keys, self.grasp, max(0, info["step"] + 1 - self.lag), self.length)
        return a


@dataclass
class EarlyRelease(Scripted):
    """The script that opens somewhere along the carry: after the lift, before the arm is down at the place."""

    def reset(self, task: SceneTask, info: dict[str, Any], rng: np.random.Generator) -> None:
        super().reset(task, info, rng)
        self.grasp = (self.grasp[0], float(rng.uniform(0.6, 0.88)))


@dataclass
class WrongBlock(Scripted):
    """The script carried out on a block the task does not name (nor the one to stack on)."""

    def carry(self, task: SceneTask, rng: np.random.Generator) -> str:
        others = [n for n in BLOCK_NAMES if n not in (task.target, task.place_on)]
        return others[int(rng.integers(len(others)))]


@dataclass
class Random:
    """A position anywhere in the workspace and an opening between closed and open, every step."""

    name: str = "random"
    rng: np.random.Generator | None = field(default=None, repr=False)

    def reset(self, task: SceneTask, info: dict[str, Any], rng: np.random.Generator) -> None:
        self.rng = rng

    def act(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> np.ndarray:
        pos = self.rng.uniform(WORKSPACE_LOW[:3], WORKSPACE_HIGH[:3])
        return np.array([*pos, self.rng.uniform(CLOSED - 0.01, OPEN + 0.01)])


def panel() -> list[Policy]:
    """The panel, from the most to the least skilled by design (the rates measured are in docs/benchmarks.md)."""
    return [Scripted("expert"), Noisy("noisy-0.01", sigma=0.01), EarlyRelease("early-release"),
            LateGripper("late-gripper", max_lag=4),
            Noisy("noisy-0.02", sigma=0.02), Noisy("noisy-0.03", sigma=0.03),
            WrongBlock("wrong-block"), Random("random")]


@dataclass
class Rollout:
    """One episode's end: whether the simulator's predicate holds, and the final views asked for."""

    policy: str
    seed: int
    task: SceneTask
    success: bool
    steps: int
    views: dict[str, np.ndarray]
    cameras: dict[str, Any]
    info: dict[str, Any]


def policy_rng(policy: str, seed: int) -> np.random.Generator:
    """The policy's random numbers for the episode `seed`: the same each run, other for another policy."""
    return np.random.default_rng([seed, zlib.crc32(policy.encode())])


def run_episode(env: Any, policy: Policy, seed: int, options: dict[str, Any], chunk: int = 1
                ) -> tuple[dict[str, Any], list[np.ndarray]]:
    """One episode of `policy` in any env of gymnasium's API whose `info` carries the start's facts and the actions
    taken so far (`info["step"]`): the scene's `SceneEnv`, or a served world model's `WorldModelEnv` given the
    simulator's facts (`start_facts`) in options["facts"]. The same loop for both, so a policy's rollouts in the
    two differ only in the env. Each step sends `chunk` actions (as [chunk, 4], what a world model steps on; 1:
    one action [4]), each asked of the policy with the step it will run at, open loop within the chunk as an
    action-chunking policy is. Runs until the env truncates or terminates; (the last info, the actions sent)."""
    obs, info = env.reset(seed=seed, options=options)
    task = SceneTask.parse(info["task"] if "task" in info else info["instruction"])
    policy.reset(task, info, policy_rng(policy.name, seed))
    sent: list[np.ndarray] = []
    while True:
        actions = np.stack([policy.act(obs, {**info, "step": info["step"] + i}) for i in range(chunk)])
        sent.append(actions)
        obs, _, terminated, truncated, info = env.step(actions if chunk > 1 else actions[0])
        if terminated or truncated:
            return info, sent


def rollout(env: SceneEnv, policy: Policy, task: SceneTask | str, seed: int,
            views: tuple[str, ...] = ()) -> Rollout:
    """Run `policy` on `task` in the layout of `seed` until the env truncates; draw `views` of the last state."""
    task = SceneTask.parse(task)
    info, _ = run_episode(env, policy, seed, {"task": task})
    return Rollout(policy.name, seed, task, bool(info["success"]), info["step"],
                   env.render_views(views) if views else {}, env.camera_models(), info)
