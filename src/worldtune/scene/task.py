"""The scene's tasks: which block to pick and where it goes, and the instruction the datasets write for it.

Why a type of its own: the simulator, the scripted policies and the success detector all take a task, and a
generated clip comes with its instruction only; `SceneTask.parse` reads that instruction back, so a clip of the
scene can be judged from its text alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from worldtune.errors import ConfigError
from worldtune.scene.episode import BLOCK_NAMES, block_shape

_PARSE = re.compile(r"picks up the (\w+) (?:cube|block) and (?:places it in the (bowl)|stacks it on the (\w+) "
                    r"(?:cube|block))", re.IGNORECASE)


@dataclass(frozen=True)
class SceneTask:
    """Pick the block `target` and put it in the bowl (`place_on` "bowl") or on the block `place_on`."""

    target: str
    place_on: str = "bowl"

    def __post_init__(self) -> None:
        if self.target not in BLOCK_NAMES:
            raise ConfigError(f"task: no block named '{self.target}': pick one of {', '.join(BLOCK_NAMES)}")
        if self.place_on != "bowl" and (self.place_on not in BLOCK_NAMES or self.place_on == self.target):
            others = [n for n in BLOCK_NAMES if n != self.target]
            raise ConfigError(f"task: '{self.place_on}' is no place for the {self.target} block: 'bowl' or one of "
                              f"{', '.join(others)}")

    @property
    def instruction(self) -> str:
        """The instruction the scene's datasets write for this task (worldtune.scene.episode's wording)."""
        shape = block_shape(self.target)
        if self.place_on == "bowl":
            return f"picks up the {self.target} {shape} and places it in the bowl."
        return (f"picks up the {self.target} {shape} and stacks it on the {self.place_on} "
                f"{block_shape(self.place_on)}.")

    @classmethod
    def parse(cls, task: "SceneTask | str") -> "SceneTask":
        """A task from its instruction ("... picks up the red cube and places it in the bowl."), or as given."""
        if isinstance(task, SceneTask):
            return task
        m = _PARSE.search(task)
        if m is None:
            raise ConfigError(f"task: '{task[:80]}' is not one of the scene's instructions: write it as 'picks up "
                              "the red cube and places it in the bowl.' or '... and stacks it on the blue cube.'")
        return cls(m.group(1).lower(), "bowl" if m.group(2) else m.group(3).lower())

    @classmethod
    def draw(cls, rng: np.random.Generator, stack_share: float = 0.5) -> "SceneTask":
        """A task drawn at random: any block; into the bowl, or (`stack_share` of the time) onto another block."""
        target = BLOCK_NAMES[int(rng.integers(len(BLOCK_NAMES)))]
        if rng.random() >= stack_share:
            return cls(target)
        others = [n for n in BLOCK_NAMES if n != target]
        return cls(target, others[int(rng.integers(len(others)))])
