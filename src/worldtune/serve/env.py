"""`WorldModelEnv`: the served world model as a gymnasium-style environment, for policy-evaluation loops.

It follows gymnasium's API (`reset(seed=, options=) -> (obs, info)`, `step(action) -> (obs, reward,
terminated, truncated, info)`, `close()`), and is a `gymnasium.Env` when gymnasium is installed; worldtune
does not depend on it. One step is one action chunk [K, D]. The observation is every camera's latest frame
{camera: [h, w, 3] uint8}; `info["frames"]` holds all K frames of the chunk, `info["step"]` the actions taken so
far. A world model has no notion of success of its own, so `terminated` is False; `truncated` turns True after
`max_chunks` chunks, and that step ends (records) the rollout, so its `info` carries "recorded" and, when the
server has a judge (`[serve.judge]`), "success", "progress" and the whole verdict as "judge"; the reward is 1.0
on that step when the judge calls it a success, else 0.0, as the scene's simulator rewards a task done
(`worldtune.scene.sim.SceneEnv`: the same API, so one loop, `worldtune.scene.policies.run_episode`, runs a
policy in both). An episode that
runs without `max_chunks` ends at the next `reset` or `close`; `ended` lists every ended rollout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from worldtune.serve.client import Client
from worldtune.serve.protocol import Ended

try:  # a gymnasium.Env when gymnasium is there, so its wrappers and checks accept it
    import gymnasium

    _Base: type = gymnasium.Env
except ImportError:  # duck-typed: the same methods and attributes
    _Base = object


class WorldModelEnv(_Base):  # type: ignore[misc, valid-type]
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, client: Client | str, frames: dict[str, np.ndarray] | np.ndarray, instruction: str,
                 max_chunks: int | None = None, seed: int = 0, policy: str | None = None) -> None:
        self.client = client if isinstance(client, Client) else Client(client)
        self.frames, self.instruction, self.max_chunks, self.seed = frames, instruction, max_chunks, seed
        self.policy = policy  # the label every rollout's recording carries (`Client.reset`)
        self.server = self.client.info()
        self.chunks = 0
        self.steps = 0  # actions taken in this rollout (chunks x their length)
        self.facts: dict[str, Any] = {}  # options["facts"] of the last reset, in every info
        self.recorded: list[str] = []
        self.ended: list[Ended] = []  # every recorded rollout, with its judge's verdict (None: no judge)
        self._spaces()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a rollout (recording the previous one); `options` may replace "frames", "instruction" and
        "policy", and "facts" is a dict of what the caller knows of the start (the scene's layout, say: a world
        model has no state to report), put into every step's `info` so a policy that reads it runs here as it
        runs in a simulator."""
        options = options or {}
        self.frames = options.get("frames", self.frames)
        self.instruction = options.get("instruction", self.instruction)
        self.policy = options.get("policy", self.policy)
        self.facts = dict(options.get("facts", self.facts))
        if seed is not None:
            self.seed = seed
        self._end()
        obs = self.client.reset(self.frames, self.instruction, self.seed, self.policy)
        self.chunks = self.steps = 0
        return obs, {**self.facts, "chunk": 0, "step": 0, "instruction": self.instruction, "policy": self.policy}

    def step(self, action: np.ndarray):
        frames = self.client.step(action)
        self.chunks += 1
        self.steps += len(action)
        obs = {k: v[-1] for k, v in frames.items()}
        truncated = self.max_chunks is not None and self.chunks >= self.max_chunks
        info: dict[str, Any] = {**self.facts, "frames": frames, "chunk": self.chunks, "step": self.steps,
                                "instruction": self.instruction}
        if truncated:  # the episode is over: end it now so its recording and scores come with this step
            ended = self._end()
            info.update(recorded=ended.recorded, judge=ended.judge, success=ended.success, progress=ended.progress)
        return obs, float(bool(info.get("success"))), False, truncated, info

    def close(self) -> None:
        self._end()

    def _end(self) -> Ended:
        ended = self.client.end()
        if ended.recorded:
            self.recorded.append(ended.recorded)
            self.ended.append(ended)
        return ended

    def _spaces(self) -> None:
        """gymnasium spaces when gymnasium is installed (action: one chunk; observation: one frame a camera)."""
        if _Base is object or not self.server.get("camera_sizes"):
            return
        from gymnasium import spaces

        k = self.server.get("chunk_size") or 16
        self.action_space = spaces.Box(-np.inf, np.inf, (k, int(self.server["action_width"])), np.float32)
        self.observation_space = spaces.Dict({c: spaces.Box(0, 255, (h, w, 3), np.uint8)
                                              for c, (h, w) in self.server["camera_sizes"].items()})
