"""Two labellers on the same held-out real clips: which one recovers the actions the robot really took?

`worldtune trajectories` can label generated videos with worldtune's IDM or with Cosmos 3's inverse dynamics.
Generated videos have no true actions, so the labellers are compared where the truth is known: the held-out
clips of the prepared dataset (the first clip of each held-out episode, as evaluate's actions mode picks
them). Each labeller labels each clip as it labels a generated video (the IDM the clip's camera views,
Cosmos 3 the packed clip), and its labels of the clip's K = F - 1 transitions are compared with the recorded
action chunk (`worldtune.data.actions.clip_chunk`), in the dataset's units:

- `mse` per action entry and `mse_overall` (mean over entries);
- `normalised_mse`: mean over the entries that vary of MSE / std² (the training episodes' std from
  actions.json; constant entries are listed in `constant_entries`), so entries of any scale weigh the same;
  1.0 is what always predicting the mean action scores on data like the training episodes (the
  `mean_action` row is that baseline on these clips).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

Labeller = Callable[[Any], np.ndarray]  # an ActionClip -> actions [>= F-1, D] in dataset units


def compare_labellers(dataset: str | Path, labellers: dict[str, Labeller], max_clips: int) -> dict[str, Any]:
    """Action MSE of every labeller (and the mean-action baseline) on up to `max_clips` held-out clips."""
    from worldtune.data.actions import read_index
    from worldtune.eval.dynamics import load_clips, pick_clips
    from worldtune.idm.scores import constant_entries, normalised_errors

    root = Path(dataset)
    index = read_index(root)
    names = list(index.get("names") or [f"action_{i}" for i in range(int(index["width"]))])
    stats = (index.get("stats") or {}).get("action") or {}
    std = np.asarray(stats.get("std") or [1.0] * len(names), np.float64)
    mean = np.asarray(stats.get("mean") or [0.0] * len(names), np.float64)
    clips = load_clips(root, pick_clips(root, "val", 1, max_clips), len(names))
    truth = np.concatenate([c.actions for c in clips]).astype(np.float64)
    from worldtune.console import Progress

    preds: dict[str, Any] = {}
    with Progress("comparing labellers", len(clips) * len(labellers), "clips") as bar:
        for name, fn in labellers.items():
            bar.info(name)
            labelled = []
            for c in clips:
                labelled.append(np.asarray(fn(c), np.float64)[:len(c.actions)])
                bar.advance()
            preds[name] = np.concatenate(labelled)
    preds["mean_action"] = np.broadcast_to(mean, truth.shape)
    out: dict[str, Any] = {}
    for name, p in preds.items():
        mse = ((p - truth) ** 2).mean(0)
        out[name] = {"mse": dict(zip(names, mse.tolist())), "mse_overall": float(mse.mean()),
                     "normalised_mse": normalised_errors(mse, None, std)["normalised_mse"]}
    return {"dataset": str(root.resolve()), "clips": [c.name for c in clips],
            "constant_entries": constant_entries(std, names),
            "episodes": sorted({c.episode for c in clips}), "transitions": int(len(truth)), "action_names": names,
            "labellers": out}
