"""Scoring a recorded rollout with the scene's success detector: `[serve.judge] kind = "scene"`.

Why a second judge: a VLM judge is itself a model whose verdicts need checking, and it costs a GPU. Where the
world model was trained on worldtune's synthetic scene, the scene's own success detector
(`worldtune.scene.detector`: the blocks and the bowl found by colour in two exterior views and triangulated with
the cameras of the scene dataset's `meta/cameras.json`) reads the rollout's last frames and says whether the
instruction's block rests in the bowl or on the named block. No model weights, milliseconds a rollout, and its
accuracy against the simulator's own predicate is measured (docs/scene.md).

The verdict is written as the VLM judge's is (`<episode>/judge.json`, format `worldtune.serve.judge`), so
`worldtune serve-summary` ranks policies from either. Its one rubric is `scene_detector` (0 or 1). The detector
has no partial credit: `progress` is 1.0 for a success, else 0.0. A rollout whose block the detector cannot find
in two views (the model lost it, or drew it out of view) is not a success: `success` false, rubric status
`undetermined`, and the detector's reason in the rubric's explanation. An instruction that is not one of the
scene's tasks, or frames without two exterior cameras, is a judge error (`success` null, `error` says why).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from worldtune.config import ServeJudgeConfig
from worldtune.scene.detector import SuccessDetector
from worldtune.serve.judging import FILE, FORMAT, VERSION, _one_line

MODEL = "worldtune.scene.detector"  # the verdict's "model"
RUBRIC = "scene_detector"


@dataclass
class SceneJudge:
    """The scene's success detector as a serve judge: same call, same judge.json, same counts as `RolloutJudge`."""

    detector: SuccessDetector
    cameras_file: str | None = None
    judged: int = 0
    failed: int = 0
    last_error: str | None = None

    def __call__(self, episode: Path, instruction: str, written: dict[str, np.ndarray] | None = None,
                 policy: str | None = None) -> dict[str, Any]:
        """The verdict on one recorded episode, also written to `<episode>/judge.json`; never raises (a failure is
        the verdict's `error`, the recording stands)."""
        t0 = time.perf_counter()
        verdict = self._verdict(episode, instruction, written, policy)
        verdict["seconds"] = round(time.perf_counter() - t0, 3)
        try:
            from worldtune.atomic import atomic_write_json

            atomic_write_json(episode / FILE, verdict)
        except Exception as e:  # noqa: BLE001 - a failed write must not fail the `end` that recorded the episode
            verdict["errors"] += 1
            verdict["error"] = verdict["error"] or _one_line(e)
        if verdict["errors"]:
            self.failed += 1
            self.last_error = verdict["error"]
            print(f"worldtune serve: {episode.name} not judged ({verdict['error']})", file=sys.stderr, flush=True)
        else:
            self.judged += 1
        return verdict

    def info(self) -> dict[str, Any]:
        """What /info reports about the judge."""
        return {"kind": "scene", "model": MODEL, "cameras": self.cameras_file, "rubrics": [RUBRIC],
                "judged": self.judged, "failed": self.failed, "last_error": self.last_error}

    def describe(self) -> str:
        """One line for the server's start-up message."""
        return f"the scene's success detector (cameras {self.cameras_file or 'given in Python'})"

    def _verdict(self, episode: Path, instruction: str, written: dict[str, np.ndarray] | None,
                 policy: str | None) -> dict[str, Any]:
        head = {"format": FORMAT, "version": VERSION, "episode": episode.name, "instruction": instruction,
                "policy": policy, "model": MODEL, "endpoint": None}
        try:
            frames, keys, fps = _episode_frames(episode, written)
            found = self.detector(frames, instruction)
        except Exception as e:  # noqa: BLE001 - an unreadable episode or a foreign instruction: this rollout's error
            return {**head, "cameras": None, "frames": None, "fps": None, "success": None, "progress": None,
                    "rubrics": {}, "errors": 1, "error": _one_line(e)}
        success = bool(found.success)
        rubric = {"role": "success", "score": int(success), "scale": [0, 1],
                  "status": "ok" if found.success is not None else "undetermined", "explanation": found.reason,
                  "error": None}
        return {**head, "cameras": keys, "frames": int(min(len(f) for f in frames.values())), "fps": fps,
                "success": success, "progress": float(success), "rubrics": {RUBRIC: rubric},
                "positions": found.positions, "errors": 0, "error": None}


def _episode_frames(episode: Path, written: dict[str, np.ndarray] | None
                    ) -> tuple[dict[str, np.ndarray], list[str], float]:
    """({camera key: [T, H, W, 3]}, keys, fps) of a recorded episode: the recorder's frames, or read back."""
    from worldtune.data.lerobot import LeRobotDataset

    ds = LeRobotDataset(episode)  # the metadata: camera keys and fps
    keys = ds.camera_keys()
    if written is None or set(written) != set(keys):
        written = {k: ds.episode_frames(ds.episodes[0], k) for k in keys}
    return {k: written[k] for k in keys}, keys, float(ds.fps or 0.0)


def scene_judge(cfg: ServeJudgeConfig) -> SceneJudge:
    """The detector `[serve.judge]` describes, its cameras read now (a bad file fails at start, not at `end`)."""
    assert cfg.cameras is not None  # the config's check
    return SceneJudge(SuccessDetector.from_cameras_json(cfg.cameras, last=cfg.last_frames), cfg.cameras)


__all__ = ["SceneJudge", "scene_judge"]
