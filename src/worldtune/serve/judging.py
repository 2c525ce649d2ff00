"""Scoring a recorded rollout with the VLM judge: did the policy do the task, and how far did it get.

When a rollout ends, `RolloutJudge` takes the episode the recorder wrote (every camera, side by side in the
recording's camera order, the way `worldtune generate` shows separate views), sends it with the rollout's
instruction to the chat-completions judge of `eval/judge.py` under two rubrics — task success (0/1) and task
progress (0..4) — and writes the verdict as `<episode>/judge.json` (through `worldtune.atomic`). The episode
is judged only after it is recorded, so a judge that hangs or fails never costs the recording; a failure
leaves `success` and `progress` None and says why in `error`, and is counted.

The server hands over the frames the recorder has just written, so judging does not decode them again:
decoding the lossless videos of a 129-frame three-camera rollout costs several times more CPU than the
rest of judging (benchmarks/serve_judge_bench.py). Without them (judging a recording later) the episode's
videos are read back.

One `Judge` serves the whole life of the server, so its circuit breaker spans rollouts: once the judge
server has failed `max_consecutive_failures` requests in a row, the next rollouts end at once with the
breaker's reason, until `retry_after` seconds have passed and one request is tried again.

judge.json (format `worldtune.serve.judge`, version 1):

    {"format": "worldtune.serve.judge", "version": 1, "episode": "episode_000003", "instruction": "...",
     "policy": "the label given at reset" | null, "model": "...", "endpoint": "...", "cameras": [camera keys, left to right], "frames": 49, "fps": 15,
     "success": true | false | null, "progress": 0.75 | null,
     "rubrics": {name: {"role": "success" | "progress" | "extra", "score": 3, "scale": [0, 4],
                        "status": "ok | parse_failed | error | skipped", "explanation": "...", "error": null}},
     "errors": 0, "error": null | "the first failure, one line", "seconds": time spent judging}
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from worldtune.config import ServeJudgeConfig
from worldtune.eval.judge import Judge, JudgeResult, Rubric, load_rubric

FORMAT, VERSION = "worldtune.serve.judge", 1
FILE = "judge.json"  # in the episode folder, beside data/, meta/ and videos/


@dataclass
class RolloutJudge:
    """One judge for the server's life: asks, maps scores to success/progress, writes judge.json, counts."""

    judge: Judge
    success: Rubric
    progress: Rubric
    judged: int = 0  # rollouts judged with every rubric scored
    failed: int = 0  # rollouts with some rubric not scored (error, unparsable answer)
    last_error: str | None = None
    _roles: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # rubric -> its role

    def __post_init__(self) -> None:
        self._roles = {r.name: "extra" for r in self.judge.rubric_list}
        self._roles.update({self.success.name: "success", self.progress.name: "progress"})

    def __call__(self, episode: Path, instruction: str, written: dict[str, np.ndarray] | None = None,
                 policy: str | None = None) -> dict[str, Any]:
        """The verdict on one recorded episode, also written to `<episode>/judge.json`; `written`: its frames by
        camera key as the recorder wrote them (None: read the episode's videos); `policy`: the rollout's label,
        kept in the verdict so a ranking groups by it. Never raises: a judge or a write that fails is reported
        in the verdict, the rollout and its recording stand."""
        t0 = time.perf_counter()
        verdict = self._verdict(episode, instruction, written, policy)
        verdict["seconds"] = round(time.perf_counter() - t0, 3)
        try:
            from worldtune.atomic import atomic_write_json

            atomic_write_json(episode / FILE, verdict)
        except Exception as e:  # noqa: BLE001 - a failed write must not fail the `end` that recorded the episode
            verdict["errors"] += 1
            verdict["error"] = verdict["error"] or _one_line(e)
        self._count(verdict)
        return verdict

    def describe(self) -> str:
        """One line for the server's start-up message."""
        return (f"{self.judge.model} at {self.judge.endpoint} (rubrics "
                f"{', '.join(r.name for r in self.judge.rubric_list)})")

    def info(self) -> dict[str, Any]:
        """What /info reports: where the judge is, its rubrics, and how judging went so far."""
        return {"kind": "vlm", "endpoint": self.judge.endpoint, "model": self.judge.model,
                "rubrics": [r.name for r in self.judge.rubric_list], "judged": self.judged, "failed": self.failed,
                "last_error": self.last_error}

    # ------------------------------------------------------------------ steps
    def _verdict(self, episode: Path, instruction: str, written: dict[str, np.ndarray] | None,
                 policy: str | None) -> dict[str, Any]:
        head = {"format": FORMAT, "version": VERSION, "episode": episode.name, "instruction": instruction,
                "policy": policy, "model": self.judge.model, "endpoint": self.judge.endpoint}
        try:
            keys, frames, fps = episode_video(episode, written)
            results = self.judge.judge_frames(episode.name, frames, fps, instruction)
        except Exception as e:  # noqa: BLE001 - an unreadable episode is this rollout's judge error, not a crash
            return {**head, "cameras": None, "frames": None, "fps": None, "success": None, "progress": None,
                    "rubrics": {}, "errors": 1, "error": _one_line(e)}
        return {**head, "cameras": keys, "frames": len(frames), "fps": fps, **self._scores(results)}

    def _scores(self, results: list[JudgeResult]) -> dict[str, Any]:
        """success / progress from their rubrics' scores; every rubric's answer; the failures, counted."""
        scales = {r.name: r.scale for r in self.judge.rubric_list}
        rubrics = {r.rubric: {"role": self._roles[r.rubric], "score": r.score, "scale": list(scales[r.rubric]),
                              "status": r.status, "explanation": r.explanation or None,
                              "error": r.error or (f"no score in the answer: {_clip(r.text)}"
                                                   if r.status == "parse_failed" else None)}
                   for r in results}
        bad = [v["error"] for v in rubrics.values() if v["score"] is None]
        s, p = rubrics[self.success.name]["score"], rubrics[self.progress.name]["score"]
        return {"success": None if s is None else s == self.success.scale[1],
                "progress": None if p is None else _unit(p, self.progress.scale),
                "rubrics": rubrics, "errors": len(bad), "error": bad[0] if bad else None}

    def _count(self, verdict: dict[str, Any]) -> None:
        """Count the verdict; a failure gets one line on stderr, since the policy may not read its answer."""
        if verdict["errors"]:
            self.failed += 1
            self.last_error = verdict["error"]
            print(f"worldtune serve: {verdict['episode']} not fully judged ({verdict['error']})", file=sys.stderr,
                  flush=True)
        else:
            self.judged += 1


# ---------------------------------------------------------------------------------------- building
def rollout_judge(cfg: ServeJudgeConfig) -> RolloutJudge | None:
    """The judge `[serve.judge]` describes, its rubrics loaded now (a bad rubric fails at start, not at the
    first `end`); None when no endpoint is set."""
    if not cfg.endpoint:
        return None
    success, progress = load_rubric(cfg.success_rubric), load_rubric(cfg.progress_rubric)
    extra = [load_rubric(r) for r in cfg.extra_rubrics]
    rubrics = list({r.name: r for r in (success, progress, *extra)}.values())
    api_key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
    judge = Judge(endpoint=cfg.endpoint, model=cfg.model, rubrics=rubrics, fps=cfg.fps, input=cfg.input,
                  max_images=cfg.max_images, concurrency=1, timeout=cfg.timeout, retries=cfg.retries,
                  backoff=cfg.backoff, max_tokens=cfg.max_tokens, cache_path=None, api_key=api_key,
                  extra_body=dict(cfg.extra_body), max_consecutive_failures=cfg.max_consecutive_failures,
                  retry_after=cfg.retry_after)
    return RolloutJudge(judge, success, progress)


# ---------------------------------------------------------------------------------------- helpers
def episode_video(episode: Path, written: dict[str, np.ndarray] | None = None) -> tuple[list[str], np.ndarray, float]:
    """(camera keys, frames [T, H, sum W, 3], fps) of a recorded one-episode dataset: every camera side by side
    in the dataset's camera order, from `written` (the recorder's frames by key) or else read back. The recorder
    writes one frame size for all cameras of a rollout, so they line up."""
    from worldtune.data.lerobot import LeRobotDataset
    from worldtune.infer.multiview import mosaic

    ds = LeRobotDataset(episode)  # reads only the metadata: the camera order and fps
    keys = ds.camera_keys()
    if written is None or set(written) != set(keys):
        written = {k: ds.episode_frames(ds.episodes[0], k) for k in keys}
    return keys, mosaic({k: written[k] for k in keys}), float(ds.fps or 0.0)


def _unit(score: int, scale: tuple[int, int]) -> float:
    lo, hi = scale
    return round((score - lo) / (hi - lo), 4) if hi > lo else float(score >= hi)


def _clip(text: str | None, n: int = 120) -> str:
    t = " ".join((text or "").split())
    return repr(t if len(t) <= n else t[:n] + "...")


def _one_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


__all__ = ["RolloutJudge", "rollout_judge", "episode_video", "FILE"]
