"""Closed-loop action consistency: do the actions read off a generated video match the actions that made it?

`evaluate.mode = "actions"` makes every video under a known action chunk (the clip's own, or another episode's;
worldtune.eval.dynamics). Label each video back with an inverse-dynamics labeller and compare the labels with that
chunk, entry by entry. It says two things at once: whether the world model's motion follows its actions closely
enough for a labeller to recover them, and whether labels that a labeller writes for generated videos (the
trajectories stage) can be trusted. The same labeller on the real clips under their own actions is the ceiling.

Per action entry j, over all videos of a model (pooled, so a video whose chunk sits near the mean does not
explode a ratio):

    nmse_j = sum (label - drive)^2 / sum (mean_j - drive)^2

where `mean_j` is the labeller's training mean of entry j: 1.0 is no better than answering the mean action
whatever the video shows, 0 is exact. Entries whose drive never varies (constant in the data) have no
baseline and are listed, not averaged. The figure is the mean over the varying entries, with a 95 % interval
from a bootstrap over inputs (clips): all videos of one clip move together.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from worldtune.eval.stats import BOOTSTRAP_SEED, CI_LEVEL, N_BOOT

REAL = "real clip"  # the row of the ground-truth clips under their own actions: the labeller's ceiling

#: what a labeller reads (a video's views, or its packed frames) -> actions [T, D] in dataset units
Labeller = Callable[[Any], np.ndarray]


def squared_errors(labels: np.ndarray, drive: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per entry: (sum over the chunk of (label - drive)^2, sum of (mean - drive)^2). Action t of a chunk moves
    frame t to t + 1, as the dataset records it and the labeller reads it: labels [K+1, D] or [K, D], drive [K, D]."""
    k = len(drive)
    if len(labels) < k:
        raise ValueError(f"{len(labels)} labelled actions for a chunk of {k}")
    return ((labels[:k] - drive) ** 2).sum(0), ((mean[None] - drive) ** 2).sum(0)


def bootstrap_ci(clusters: Sequence[tuple[list[np.ndarray], list[np.ndarray]]], varying: np.ndarray,
                 n_boot: int = N_BOOT, seed: int = BOOTSTRAP_SEED, level: float = CI_LEVEL) -> tuple[float, float] | None:
    """Percentile interval of the pooled normalised MSE (mean over the varying entries of sum(errors) /
    sum(baselines)), resampling whole inputs; None with fewer than two."""
    if len(clusters) < 2:
        return None
    e = np.stack([np.sum(c[0], axis=0) for c in clusters])[:, varying]
    b = np.stack([np.sum(c[1], axis=0) for c in clusters])[:, varying]
    idx = np.random.default_rng(seed).integers(0, len(clusters), size=(n_boot, len(clusters)))
    ratios = (e[idx].sum(1) / np.maximum(b[idx].sum(1), 1e-30)).mean(1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def score(videos: Sequence[dict[str, Any]], label: Labeller, drives: Mapping[str, np.ndarray], mean: np.ndarray,
          names: Sequence[str], read: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """The consistency of one model: `videos` are rows with `name` (input clip), `drive` (the clip whose actions
    made it, a key of `drives`) and what `read` turns into the labeller's input."""
    by_input: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = defaultdict(lambda: ([], []))
    used = []
    for v in videos:
        drive = drives[v["drive"]]
        err, base = squared_errors(label(read(v)), drive, mean)
        by_input[v["name"]][0].append(err)
        by_input[v["name"]][1].append(base)
        used.append(drive)
    spread = np.concatenate(used).std(0) if used else np.zeros(len(names))
    varying = spread > 1e-9
    errors = [e for es, _ in by_input.values() for e in es]
    baselines = [b for _, bs in by_input.values() for b in bs]
    out: dict[str, Any] = {"n_videos": len(errors), "n_inputs": len(by_input),
                           "constant": [n for n, v in zip(names, varying) if not v]}
    if not errors or not varying.any():
        return {**out, "nmse": None, "ci_low": None, "ci_high": None, "per_entry": {},
                "reason": "no videos" if not errors else "every action entry is constant"}
    ci = bootstrap_ci(list(by_input.values()), varying)
    ratios = np.sum(errors, axis=0)[varying] / np.sum(baselines, axis=0)[varying]  # per varying entry
    return {**out, "nmse": float(np.mean(ratios)), "ci_low": ci[0] if ci else None,
            "ci_high": ci[1] if ci else None, "reason": "" if ci else "one input: no interval",
            "per_entry": dict(zip([n for n, v in zip(names, varying) if v], map(float, ratios)))}


def run(generations: Path, dataset: Path, labellers: Mapping[str, tuple[Labeller, np.ndarray, list[str], str]]
        ) -> dict[str, Any]:
    """Label every video of a generation folder (actions mode, or videos made from a clip's first frame; baselines
    too) and its real clips with each labeller
    {kind: (label, its mean action, action names, what it reads: "views" or "video")}; per labeller and model,
    the consistency with the chunks that drove the videos."""
    from worldtune.data.actions import clip_chunk, load_clip
    from worldtune.data.video import read_frames
    from worldtune.infer import records
    from worldtune.names import inside

    rows = list(records.all_rows(generations).values())
    manifest = _manifest(dataset)
    drives = {name: clip_chunk(load_clip(dataset, name)["action"], int(manifest[name].get("stride") or 1))
              for name in {_drive(r) for r in rows} | {str(r["name"]) for r in rows}}
    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    real: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (str(r["model"]), str(r["name"]), int(r["seed"]))):
        name = str(r["name"])
        by_model[str(r["model"])].append({"views": r["views"], "video": r["video"], "task": r.get("instruction"),
                                          "name": name, "drive": _drive(r)})
        real[name] = {"views": r["ground_truth_views"], "video": r["ground_truth"], "task": r.get("instruction"),
                      "name": name, "drive": name}
    out: dict[str, Any] = {}
    for kind, (label, mean, names, reads) in labellers.items():
        def read(v: dict[str, Any], reads: str = reads) -> Any:
            where = f"{generations}/generations.jsonl"
            if reads == "views":
                return {role: read_frames(inside(generations, path, f"{where} views"))
                        for role, path in v["views"].items()}
            return read_frames(inside(generations, v["video"], f"{where} video")), v["task"]

        models = {m: score(videos, label, drives, mean, names, read) for m, videos in by_model.items()}
        models[REAL] = score(list(real.values()), label, drives, mean, names, read)
        out[kind] = {"action_names": list(names), "models": models}
    return out


def _drive(row: dict[str, Any]) -> str:
    """The clip whose actions a generated video is held to: the chunk that drove it (actions mode), else its own
    clip's (a video generated from the clip's first frame and instruction, or a baseline: a labeller reading it
    should find what the robot did from there)."""
    return str(row.get("actions_from") or row["name"])


def idm_labeller(path: str, device: str = "auto") -> tuple[Labeller, np.ndarray, list[str], str]:
    """worldtune's own IDM (a `worldtune idm` run): it reads the camera views; its mean is its training mean."""
    from worldtune.idm.label import ActionLabeler

    labeller = ActionLabeler.load(path, device)
    mean = labeller.model.action_mean.detach().cpu().numpy().astype(np.float64)
    return labeller.label, mean, labeller.action_names, "views"


def cosmos3_labeller(cfg: Any, dataset: Path, fps: float) -> tuple[Labeller, np.ndarray, list[str], str]:
    """The [model]'s own inverse dynamics (trajectories.cosmos3's settings): it reads the packed video; the mean is
    the dataset's training mean."""
    from worldtune.data.actions import read_index
    from worldtune.idm.cosmos3 import load_cosmos3_labeler

    labeller = load_cosmos3_labeler(cfg, str(dataset), fps)
    mean = np.asarray(read_index(dataset)["stats"]["action"]["mean"], np.float64)
    return (lambda video_task: labeller.label_video(*video_task)), mean, labeller.action_names, "video"


NOTE = ("actions read back from each video by the labeller vs the actions that drove it, per action entry: "
        "sum (label - drive)^2 / sum (mean action - drive)^2 pooled over the model's videos, then the mean over the "
        "entries that vary [95 % CI over inputs]. 1.0 = no better than answering the mean action, 0 = exact; the "
        "real clips under their own actions are the labeller's ceiling")


def rows_for_display(closed: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(model, nmse [CI], n videos / inputs, worst entries) per model of one labeller, for the console and the
    report."""
    out = []
    for label, m in closed["models"].items():
        if m["nmse"] is None:
            out.append((label, "—", f"{m['n_videos']} / {m['n_inputs']}", m["reason"]))
            continue
        ci = f" [{m['ci_low']:.2f}, {m['ci_high']:.2f}]" if m["ci_low"] is not None else ""
        worst = sorted(m["per_entry"].items(), key=lambda kv: -kv[1])[:3]
        out.append((label, f"{m['nmse']:.2f}{ci}", f"{m['n_videos']} / {m['n_inputs']}",
                    ", ".join(f"{k} {v:.2f}" for k, v in worst)))
    return out


def print_tables(closed: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    for kind, per in closed.items():
        table = Table(title=f"closed-loop action consistency, {kind} labeller (normalised MSE vs the driving "
                            "actions; 1 = mean action)")
        for col in ("model", "nmse [95 % CI]", "videos / inputs", "worst entries"):
            table.add_column(col)
        for row in rows_for_display(per):
            table.add_row(*row)
        Console().print(table)


def _manifest(dataset: Path) -> dict[str, dict[str, Any]]:
    import pyarrow.parquet as pq

    return {str(r["clip_id"]): r for r in pq.read_table(dataset / "manifest.parquet").to_pylist()}
