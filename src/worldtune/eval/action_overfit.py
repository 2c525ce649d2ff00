"""Can a forward-dynamics model learn to read its actions at all? An overfit check of the conditioning path.

A few episodes of the scene share one layout, camera rig and starting pose and differ only in the arm's path (the
scene's `layout_of`), so every clip starts from the same first frame under the same caption and only its action
chunk says where the arm goes. The whole generator is trained on these clips alone, forward dynamics only, for a
fixed number of steps; then each clip's flow loss is scored at fixed noise levels and fixed noise under its own chunk
and under every other clip's. A model that reads its actions learns each clip under its own chunk and misses it under
another's; a model blind to its actions can do no better than the clips' average future, the same under any chunk.
The data and the budget are fixed, so a check that does not separate points at the conditioning path (the actions
dropped, shuffled or unreadable on their way into the model), not at too little data or training.

The figure is the ratio of the loss under the other clips' chunks to the loss under the clip's own, per clip and
pooled; it starts at 1 (a model trained on other episodes hardly tells the paths apart) and grows as the clips are
learned. `benchmarks/action_overfit.py` runs it at any size; the slow tests run it on the CPU, with the actions
zeroed or shuffled inside the conditioning path as the broken variants it must reject.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from worldtune.console import plain
from worldtune.errors import EvaluationError
from worldtune.eval.action_use import SIGMAS, forward_dynamics_losses, trainer_for

SETTINGS = ["--prepare.val_fraction", "0"]  # every clip is trained on and scored: the check asks what was learned


@dataclass(frozen=True)
class Separation:
    """Per-clip forward-dynamics losses under the clip's own chunk and under the other clips' (averaged), and what a
    perfect reader of the actions would score between the two (`oracle`)."""

    own: list[float]
    other: list[float]
    oracle: list[float]  # per clip: the gap (other - own) of a model that predicts each clip exactly under its chunk

    @property
    def ratio(self) -> float:
        """Pooled loss under other chunks / under own chunks: 1 for a model blind to its actions."""
        return statistics.fmean(self.other) / statistics.fmean(self.own)

    @property
    def min_clip_ratio(self) -> float:
        """The worst clip's ratio: every path has to be told apart, not only some."""
        return min(o / w for o, w in zip(self.other, self.own))

    @property
    def learned_share(self) -> float:
        """How much of the paths' difference the model has learned from the actions: the pooled gap (other - own)
        over a perfect reader's. 0 for a model blind to its actions (its prediction is the same under any chunk),
        1 for one that predicts each clip exactly under its own chunk; scale-free, so it reads the same early in
        training, while the clips' shared content is still being learned, as late."""
        return (statistics.fmean(self.other) - statistics.fmean(self.own)) / statistics.fmean(self.oracle)

    def row(self) -> dict[str, Any]:
        return {"own": self.own, "other": self.other, "oracle": self.oracle, "ratio": self.ratio,
                "min_clip_ratio": self.min_clip_ratio, "learned_share": self.learned_share}


@dataclass
class OverfitCheck:
    """What an overfit run measured: the separation before training and at each scoring step, and the time."""

    model: str
    paths: int
    steps: int
    before: Separation
    curve: list[tuple[int, Separation]] = field(default_factory=list)
    train_loss: list[tuple[int, float]] = field(default_factory=list)  # mean training loss since the last mark
    seconds: float = 0.0
    device: str = "cpu"
    lr: float = 0.0
    batch_size: int = 0

    @property
    def after(self) -> Separation:
        return self.curve[-1][1] if self.curve else self.before

    def separates(self, min_ratio: float) -> bool:
        """Every clip scores at least `min_ratio` times worse under another path's actions than under its own."""
        return self.after.min_clip_ratio >= min_ratio

    def row(self) -> dict[str, Any]:
        return {"model": self.model, "paths": self.paths, "steps": self.steps, "seconds": round(self.seconds, 1),
                "device": self.device, "lr": self.lr, "batch_size": self.batch_size, "sigmas": list(SIGMAS), "before": self.before.row(),
                "curve": [{"step": s, "train_loss": l, **sep.row()} for (s, sep), (_, l) in
                          zip(self.curve, self.train_loss)]}


def write_paths(out: Path, model: str, paths: int, seed: int = 0, length: int = 17) -> None:
    """The check's LeRobot dataset under `out`: `paths` episodes that share episode 0's layout, rig and start (the
    model's own camera size and held-out task when it is a seed), one clip each."""
    from worldtune.demo import demo_data
    from worldtune.scene.writer import write_demo_dataset

    scene = {**demo_data(model), "episodes": paths, "seed": seed, "length": length, "layout_of": 0,
             "motion": "varied", "workers": 1}
    write_demo_dataset(out / "lerobot", **scene)


def write_model(out: Path, model: str, fresh_transformer: bool = False,
                transformer: dict[str, Any] | None = None) -> None:
    """The check's model folder `out/model` (with `fresh_transformer`, a seed's trained VAE under its transformer's
    random start: whether a model that never learned to do without its actions learns to read them; `transformer`
    changes that transformer's config, e.g. `latent_patch_size` so that a token covers fewer pixels)."""
    from worldtune.models.build import build_transformer, with_transformer_changes
    from worldtune.models.load import init_model_dir
    from worldtune.models.registry import get_spec

    init_model_dir(model, out / "model")
    if fresh_transformer:
        build_transformer(with_transformer_changes(get_spec(model), transformer or {})).save_pretrained(
            out / "model" / "transformer", safe_serialization=True)


def prepare_paths(out: Path, model: str, overrides: Sequence[str] = ()) -> None:
    """Prepare and cache the check's clips with the demo's action recipe (the robot's actions, forward dynamics)."""
    from worldtune.cli import _stage as stage
    from worldtune.demo import demo_config

    cfg = demo_config(out, 1, model, actions=True, overrides=[*SETTINGS, *overrides])
    stage("worldtune.data.prepare")(cfg.prepare)
    stage("worldtune.data.cache")(cfg)


def oracle_gaps(trainer, sigmas: Sequence[float] = SIGMAS) -> list[float]:
    """Per clip, the loss gap of a perfect reader of the actions, averaged over the other clips and `sigmas`.

    The velocity target is v = (x_t - x0) / sigma, so a model sure that the clean clip is x0_j while it is x0_i
    misses by (x0_j - x0_i) / sigma on every noisy latent, and by nothing under the clip's own chunk: its gap is
    the mean of (x0_i - x0_j)^2 / sigma^2 over the noisy frames (all after the first)."""
    items = [trainer._item(trainer.train_set, i) for i in range(len(trainer.train_set))]
    x0 = [trainer._inputs([it])[0][:, :, 1:].float() for it in items]
    mean_inv_sq = statistics.fmean(1 / s ** 2 for s in sigmas)
    return [statistics.fmean(float(((a - b) ** 2).mean()) for j, b in enumerate(x0) if j != i) * mean_inv_sq
            for i, a in enumerate(x0)]


def separation(trainer, paths: int, oracle: list[float]) -> Separation:
    """Each clip's loss under its own chunk and, averaged, under the other `paths - 1` clips' chunks (`oracle`: the
    clips' `oracle_gaps`, fixed by their latents)."""
    offsets = tuple(range(1, paths))
    rows = forward_dynamics_losses(trainer, offsets=offsets)
    names = ["other" if k == 1 else f"other_{k}" for k in offsets]
    other = [statistics.fmean(rows[n][i] for n in names) for i in range(len(rows["own"]))]
    return Separation(own=rows["own"], other=other, oracle=oracle)


def overfit_check(out: Path, model: str, paths: int = 4, steps: int = 300, score_every: int = 0,
                  overrides: Sequence[str] = (), fresh_transformer: bool = False,
                  transformer: dict[str, Any] | None = None) -> OverfitCheck:
    """Write, prepare and cache the same-start clips (once: a second call reuses them), train the whole generator
    on them for `steps` forward-dynamics steps (the action-use recipe: batch 8, AdamW 5e-4; `overrides` change it)
    and score the separation before, every `score_every` steps (0: at the end only) and at the end. A prepared
    dataset already in `out/dataset` is used as it is (the cache keys on the VAE, so one serves every transformer)."""
    if not (out / "model" / "model_index.json").is_file():
        write_model(out, model, fresh_transformer, transformer)
    if not (out / "dataset" / "manifest.parquet").is_file():
        write_paths(out, model, paths)
        prepare_paths(out, model, overrides)
    run = out / "runs" / f"overfit_{steps}"
    trainer = trainer_for(out, model, run, "forward_dynamics", steps, mode="full", overrides=[*SETTINGS, *overrides])
    if len(trainer.train_set) != paths:
        raise EvaluationError(f"{out / 'dataset'} holds {len(trainer.train_set)} clips for {paths} paths (one 17-frame "
                              f"clip per episode): delete the folder so that the check writes its own clips")
    oracle = oracle_gaps(trainer)
    check = OverfitCheck(model=model, paths=paths, steps=steps, before=separation(trainer, paths, oracle),
                         device=trainer.dist.device.type, lr=trainer.cfg.train.lr,
                         batch_size=trainer.cfg.train.batch_size)
    t0 = time.perf_counter()
    marks = sorted({*range(score_every, steps, score_every), steps} if score_every else {steps})
    for mark in marks:
        losses = [trainer.train_step()["loss"] for _ in range(trainer.step, mark)]
        check.curve.append((mark, separation(trainer, paths, oracle)))
        check.train_loss.append((mark, statistics.fmean(losses)))
        sep = check.curve[-1][1]
        plain(f"overfit check: step {mark}/{steps}, train loss {check.train_loss[-1][1]:.4f}, separation "
              f"{sep.ratio:.4f} (worst clip {sep.min_clip_ratio:.4f}), learned share {sep.learned_share:.3f}")
    check.seconds = time.perf_counter() - t0
    return check
