"""Every rollout of `worldtune serve` as a LeRobot v3.0 episode: the frames of every camera, the actions, the
instruction.

Each episode is its own small LeRobot v3.0 dataset, `<record>/episode_NNNNNN/`, written by `LeRobotWriter`
(the writer `worldtune trajectories` uses) into `.episode_NNNNNN.partial` and renamed when complete: a
killed server leaves every finished episode whole and at most one `.partial` folder, which the next start
deletes (`clean_partials`, before the model loads). (One growing dataset would have to rewrite its metadata
after every episode, and a kill between two of those files would leave it inconsistent.) lerobot's dataset tools merge the folders into one.

Rows. A rollout of C chunks of K actions has 1 + C*K frames per camera: the first frame (as the model saw
it) and K generated frames a chunk. Row t holds frame t and the action taken there (action k of a chunk
leads from its frame k to frame k + 1), so the last frame, after the last action, repeats that action: a
LeRobot row has one. Actions are written as the policy sent them (before any normalisation).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from worldtune.atomic import output_error
from worldtune.data.lerobot_writer import LeRobotWriter, VideoEncoding
from worldtune.errors import ConfigError

EPISODE = "episode_{:06d}"
EPISODE_NAME = re.compile(r"^episode_(\d{6})$")


def clean_partials(folder: str | Path) -> None:
    """Delete the `.partial` folders a killed server left (call it while holding the folder's `OutputLock`, so that a
    live server's write in progress is never taken for a stale one)."""
    for stale in Path(folder).glob(".episode_*.partial"):
        shutil.rmtree(stale, ignore_errors=True)


@dataclass
class Recording:
    """One rollout's frames {role: chunks [n, h, w, 3]} and action chunks, held until it is written."""

    task: str
    columns: dict[str, Any]
    frames: dict[str, list[np.ndarray]]
    actions: list[np.ndarray] = field(default_factory=list)

    def add(self, frames: dict[str, np.ndarray], actions: np.ndarray) -> None:
        """One chunk: the generated frames {role: [K, h, w, 3]} and the K actions that led to them."""
        for r, f in frames.items():
            self.frames[r].append(f)
        self.actions.append(np.asarray(actions, np.float32))

    @property
    def chunks(self) -> int:
        return len(self.actions)


class EpisodeRecorder:
    """Writes finished rollouts (`Recording`s) as the record folder's next episode folders."""

    def __init__(self, folder: str | Path, fps: float, keys: dict[str, str], sizes: dict[str, tuple[int, int]],
                 action_names: list[str], lossless: bool = True, robot_type: str | None = None) -> None:
        if abs(fps - round(fps)) > 1e-3:
            raise ConfigError(f"serve.fps = {fps:g}: a LeRobot dataset needs a whole number of frames a second; set "
                              "serve.fps to an integer or serve.record = none")
        self.folder, self.fps, self.keys, self.sizes = Path(folder), int(round(fps)), keys, sizes
        self.names, self.encoding, self.robot_type = list(action_names), VideoEncoding("h264", lossless), robot_type
        self.folder.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def start(first: dict[str, np.ndarray], task: str, columns: dict[str, Any]) -> Recording:
        """A new rollout's recording from its first frames {role: [1, h, w, 3]}."""
        return Recording(task, dict(columns), {r: [f] for r, f in first.items()})

    def write(self, rec: Recording) -> tuple[Path, dict[str, np.ndarray]] | None:
        """Write the rollout as the next episode folder: (the folder, its frames {camera key: [T, h, w, 3]}); None
        (nothing written) when no chunk was stepped. A failed write leaves `rec` as it was, to be written again."""
        if not rec.actions:
            return None
        actions = np.concatenate(rec.actions)
        actions = np.concatenate([actions, actions[-1:]])  # the row of the last frame (see the module doc)
        frames = {self.keys[r]: np.concatenate(f) for r, f in rec.frames.items()}
        out = self.folder / EPISODE.format(self._next_index())
        tmp = self.folder / f".{out.name}.partial"
        writer = LeRobotWriter(tmp, self.fps, {self.keys[r]: s for r, s in self.sizes.items()}, self.names,
                               self.encoding, episodes_per_file=1, robot_type=self.robot_type)
        try:
            writer.add_episode(frames, actions, rec.task, True, {**rec.columns, "source/chunks": rec.chunks})
            writer.finish()
            tmp.rename(out)
        except BaseException as e:
            writer.abort()
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError):  # a write no library call turned into a one-line error
                raise output_error(e, out) from None
            raise
        return out, frames

    def _next_index(self) -> int:
        taken = [int(m.group(1)) for p in self.folder.iterdir() if (m := EPISODE_NAME.match(p.name))]
        return max(taken, default=-1) + 1
