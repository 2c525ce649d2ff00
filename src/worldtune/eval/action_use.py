"""Does an action-conditioned model read its actions? Its held-out forward-dynamics flow loss under its own actions
and under actions that do not belong to the clip.

Generated videos answer slowly and through the VAE and the sampler; the training objective answers directly. Each
held-out clip's forward-dynamics flow-matching loss is computed at fixed noise levels with fixed noise, under its own
action chunk, under other clips' chunks (clip i + k, cyclically, for each offset k) and under all-zero actions
(every step at the middle of the normalised range: actions that say nothing); optionally with the caption dropped
(what guidance's unconditional branch sees: then only the first frame and the actions say where the arm goes).
Everything but the actions is the same in each comparison, so a paired difference (other - own) measures what the
actions alone are worth; a model that reads them scores lower with its own. Used by
benchmarks/seed_action_use.py and the learning tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import torch

if TYPE_CHECKING:
    from worldtune.train.trainer import Trainer

SIGMAS = (0.3, 0.6, 0.9)  # noise levels of the comparison: early, middle and late in denoising


def trainer_for(demo: Path, model: str, out: Path, task: str = "forward_dynamics", steps: int = 1,
                mode: str = "lora", model_path: Path | None = None, overrides: Sequence[str] = ()) -> Trainer:
    """A Trainer of the demo's action recipe on the demo folder's clips (full fine-tunes: batch 8, AdamW 5e-4), of
    the demo's model folder or `model_path`; it holds the model and the clips the losses are computed on.
    `overrides` (dotted `--section.key value`) win over the recipe, the full fine-tune's settings included."""
    from worldtune.demo import demo_config
    from worldtune.train.trainer import Trainer

    cfg = demo_config(demo, steps, model, actions=True, overrides=overrides)
    if model_path is not None:
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(model_path)})})
    update = {"out": str(out), "resume": None, "task": task, "steps": steps}
    if mode == "full":
        named = {o[len("--train."):] for o in overrides if o.startswith("--train.")}
        full = {"batch_size": 8, "lr": 5e-4, "warmup": 20, "val_every": 0, "log_every": 50}
        update.update({k: v for k, v in full.items() if k not in named}, mode="full",
                      checkpoint=cfg.train.checkpoint.model_copy(update={"every": 0}))
    return Trainer(cfg.model_copy(update={"train": cfg.train.model_copy(update=update)}))


@torch.no_grad()
def forward_dynamics_losses(trainer: Trainer, offsets: Sequence[int] = (1,), sigmas: Sequence[float] = SIGMAS,
                            drop_text: bool = False) -> dict[str, list[float]]:
    """Per held-out clip (the training clips when none is held out), the forward-dynamics loss averaged over
    `sigmas`: {"own": [...], "zeros": [...], "other": [...] (offset 1), "other_k": [...] (offset k)}. Clip i's noise
    is seeded by i, the same for every action chunk it is scored with."""
    data = trainer.val_set if len(trainer.val_set) else trainer.train_set
    items = [trainer._item(data, i) for i in range(len(data))]
    names = {k: "other" if k == 1 else f"other_{k}" for k in offsets}
    rows: dict[str, list[float]] = {"own": [], "zeros": [], **{n: [] for n in names.values()}}
    for i, item in enumerate(items):
        x0, text, actions = trainer._inputs([item])
        if drop_text:
            text = text[:, [1, 1]]  # both rows the dropped caption
        chunks = {"own": actions, "zeros": torch.zeros_like(actions)}
        for k, name in names.items():
            chunks[name] = trainer._inputs([items[(i + k) % len(items)]])[2]
        for name, acts in chunks.items():
            rows[name].append(sum(float(trainer._forward_loss(
                x0, text, [1000 + i], model=trainer.transformer, actions=acts, modes=["forward_dynamics"],
                sigma=[s], num_cond=[1])) for s in sigmas) / len(sigmas))
    return rows
