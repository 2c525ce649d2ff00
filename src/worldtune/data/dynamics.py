"""Action training data: each clip's latents, action chunk and action caption, as generation sees them.

`train.task = "forward_dynamics"` teaches a Cosmos 3 model "first frame + the actions taken -> the video that
follows", `"inverse_dynamics"` "the video -> the actions that lead through it", `"joint"` both and the policy mode
(worldtune.train.action_flow). All of them read the same sample, one prepared clip of F frames:

- **latents** encoded as the pipeline's `forward_dynamics` mode conditions its first frame: the clip downscaled
  (never upscaled) and padded bottom/right into the canvas of the action resolution tier
  (`train.dynamics.tier`), VAE-encoded, the latents cropped back to the content. The padding reaches into the
  latents near the right and bottom border, so a clip encoded as it is would not be what generation sees;
- **actions**: the clip's chunk of K = F-1 actions at its stride (`worldtune.data.actions.clip_chunk`), scaled
  with the normalisation and training-episode statistics `prepare` recorded in `actions.json`;
- **text**: the token ids of the pipeline's structured action caption for the clip's task (view point,
  duration, fps, the canvas size) and of the empty caption that caption dropout trains.

`worldtune cache` (with any action `train.task`) stores all three, in one cache every action task reads (the
pipeline conditions every action mode on the same canvas and writes the same caption); training from decoded clips
(`train.cache = "none"`) computes them on the fly with the same functions. Successful and failed episodes are
used alike, as in NVIDIA's DROID recipe (only `prepare.only_successful` drops failures).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from worldtune.data.actions import check_chunk, clip_chunk, load_clip, normalize, read_index
from worldtune.errors import ConfigError, DatasetError
from worldtune.models.action_dynamics import ActionDomain

# The action cache's kind in its info.json and key: named after the first task that wrote it and kept, so that
# caches made for forward dynamics stay valid for every action task.
CACHE_KIND = "forward_dynamics"
AUTO_TIERS = (256, 480, 720)  # the tiers NVIDIA's shift table knows (3 / 5 / 10)


def choose_tier(height: int, width: int, setting: int | str, canvas: Callable[[int, int, int], tuple[int, int]]) -> int:
    """`auto`: the smallest tier whose canvas holds the clip without downscaling (a larger tier adds only
    padding, a smaller one discards detail); 720 when none does. An explicit tier is kept."""
    if setting != "auto":
        return int(setting)
    for tier in AUTO_TIERS:
        h, w = canvas(height, width, tier)
        if h >= height and w >= width:
            return tier
    return AUTO_TIERS[-1]


def choose_view_point(setting: str, dataset_info: dict[str, Any]) -> str:
    """`auto`: several cameras tiled into one frame are the pipeline's `concat_view`; one camera `ego_view`."""
    if setting != "auto":
        return setting
    return "concat_view" if (dataset_info.get("layout") or {}).get("type") == "grid" else "ego_view"


def key_settings(cfg, dataset_info: dict[str, Any], spec) -> dict[str, Any]:
    """What an action cache depends on beyond a video cache (its key and info.json): tier, canvas and the
    caption's view point (not the task: every action task reads the same cache). Needs only the dataset's
    info.json."""
    from worldtune.models.family import action_dynamics

    dyn = action_dynamics(spec)
    h, w = dataset_info["height"], dataset_info["width"]
    tier = choose_tier(h, w, cfg.train.dynamics.tier, dyn.canvas)
    return {"task": CACHE_KIND, "tier": tier, "canvas": list(dyn.canvas(h, w, tier)),
            "view_point": choose_view_point(cfg.train.dynamics.view_point, dataset_info)}


@dataclass(frozen=True)
class DynamicsSetup:
    """Everything about an action run that the data and the task fix: domain, scaling, chunk, canvas, caption,
    and which modes it trains."""

    task: str  # forward_dynamics, inverse_dynamics or joint (train.task)
    domain: ActionDomain
    normalization: str
    stats: dict[str, Any]  # per-dimension statistics of the action feature (actions.json "stats"."action")
    names: list[str]
    key: str
    chunk: int  # K actions per clip (F - 1)
    fps: float
    tier: int
    canvas: tuple[int, int]
    view_point: str
    init_from: int | None  # slot whose rows a new domain starts from
    rows_file: str  # the file of the domain's trained rows beside an adapter

    @property
    def width(self) -> int:
        return self.domain.width

    @property
    def modes(self) -> tuple[str, ...]:
        from worldtune.train.action_flow import task_modes

        return task_modes(self.task)

    @property
    def trains_outputs(self) -> bool:
        """Whether the task denoises actions, so the domain's rows of the output projection train too."""
        from worldtune.train.action_flow import predicts_actions

        return predicts_actions(self.task)

    @property
    def stats_digest(self) -> str:
        """Identity of the scaling: a cache of normalised actions is valid for exactly this."""
        blob = json.dumps([self.normalization, self.stats], sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def info(self) -> dict[str, Any]:
        """The facts generation needs to drive a trained adapter (saved in its info JSON and in checkpoints)."""
        return {"task": self.task, "domain": self.domain.to_dict(), "normalization": self.normalization,
                "stats": self.stats, "names": self.names, "width": self.width, "key": self.key,
                "chunk_size": self.chunk, "fps": self.fps, "tier": self.tier, "canvas": list(self.canvas),
                "view_point": self.view_point, "rows_file": self.rows_file}

    def cache_info(self) -> dict[str, Any]:
        """The fields an action cache's info.json records and training checks."""
        return {"task": CACHE_KIND, "tier": self.tier, "canvas": list(self.canvas), "view_point": self.view_point,
                "domain": self.domain.to_dict(), "action_normalization": self.normalization,
                "action_stats": self.stats_digest, "chunk_size": self.chunk}


def resolve(cfg, dataset_info: dict[str, Any], dataset: str | Path, spec) -> DynamicsSetup:
    """The action setup of a prepared dataset for this config, or a one-line error: a model without an action
    mode, a dataset prepared without actions, separate camera views, another clip length."""
    from worldtune.data.latent_cache import clip_fps
    from worldtune.models.family import action_dynamics

    dyn = action_dynamics(spec)  # a model without an action mode: its one-line error first
    if (dataset_info.get("layout") or {}).get("type") == "separate":
        raise ConfigError(f"{dataset} keeps camera views separate: the action tasks take one video per clip; prepare "
                          "with prepare.layout = \"grid\" or \"single\"")
    index = read_index(dataset)
    frames = int(dataset_info["num_frames"])
    if cfg.train.num_frames not in (None, frames):
        raise ConfigError(f"train.num_frames = {cfg.train.num_frames} differs from the clips' {frames}: the action "
                          "tasks pair each whole clip with its actions; unset train.num_frames")
    domain = ActionDomain(**index["domain"])
    init = cfg.train.dynamics.init_from
    if init is not None and (init not in dyn.domain_ids or not domain.new):
        raise ConfigError(f"train.dynamics.init_from = {init!r}: it starts a new domain's rows from an existing "
                          f"domain ({', '.join(sorted(dyn.domain_ids))}); this dataset's domain is "
                          f"'{domain.name}'{' (existing)' if not domain.new else ''}")
    keys = key_settings(cfg, dataset_info, spec)
    return DynamicsSetup(task=cfg.train.task, domain=domain, normalization=index["normalization"],
                         stats=index["stats"]["action"], names=list(index["names"]), key=index["key"], chunk=frames - 1,
                         fps=clip_fps(dataset_info, spec), tier=keys["tier"], canvas=tuple(keys["canvas"]),
                         view_point=keys["view_point"], init_from=dyn.domain_ids[init] if init is not None else None,
                         rows_file=dyn.rows_file)


def task_text(row: dict[str, Any]) -> str:
    """The caption's description: the episode's task (NVIDIA's action captions hold the task, not a template)."""
    return row.get("task") or row["prompt"]


def clip_actions(dataset: str | Path, row: dict[str, Any], setup: DynamicsSetup) -> torch.Tensor:
    """The clip's normalised action chunk [K, D] float32 (action k taken at frame k, leading to frame k+1)."""
    where = Path(dataset) / "actions" / f"{row['clip_id']}.safetensors"
    chunk = check_chunk(clip_chunk(load_clip(dataset, row["clip_id"])["action"], int(row.get("stride") or 1)),
                        setup.width, str(where))
    if len(chunk) != setup.chunk:
        raise DatasetError(f"{where}: {len(chunk)} actions for a clip of {setup.chunk + 1} frames: rerun prepare "
                           f"into {Path(dataset)} to rewrite the action files")
    return torch.from_numpy(np.ascontiguousarray(normalize(chunk, setup.stats, setup.normalization), np.float32))


# ------------------------------------------------------------------------------ training sets
class CachedDynamicsClips:
    """Clips of one split whose latents, action chunk and caption ids are in a forward-dynamics cache."""

    def __init__(self, rows: list[dict[str, Any]], cache, split: str = "train"):
        self.cache = cache
        have, acts = cache.clip_ids, cache.action_ids
        self.rows = [r for r in rows if r.get("split", "train") == split and r["clip_id"] in have
                     and r["clip_id"] in acts]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        return {"latents": self.cache.latents(row["clip_id"]).float(), "text": self.cache.text(task_text(row)),
                "actions": self.cache.actions(row["clip_id"]).float(), "clip_id": row["clip_id"],
                "prompt": row["prompt"]}


class DecodedDynamicsClips:
    """Clips of one split decoded from their mp4s (whole clips: the actions cover every frame)."""

    def __init__(self, root: str | Path, rows: list[dict[str, Any]], setup: DynamicsSetup, split: str = "train"):
        self.root, self.setup = Path(root), setup
        self.rows = [r for r in rows if r.get("split", "train") == split]

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, i: int, generator: torch.Generator | None = None) -> dict[str, Any]:
        from worldtune.data.dataset import read_clip_frames

        row = self.rows[i]
        frames = read_clip_frames(self.root, row)
        if len(frames) < self.setup.chunk + 1:
            raise DatasetError(f"clip {row['clip_id']} has {len(frames)} frames, fewer than its {self.setup.chunk} "
                               "actions need: rerun prepare")
        return {"frames": frames[:self.setup.chunk + 1], "task": task_text(row),
                "actions": clip_actions(self.root, row, self.setup), "clip_id": row["clip_id"], "prompt": row["prompt"]}


# ------------------------------------------------------------------------------ caching
def cache_encoders(dataset: str | Path, pipe, spec, setup: DynamicsSetup):
    """(encode a row's latents, the key functions of a row, its action chunk) for `worldtune cache`."""
    from worldtune.data.dataset import read_clip_frames
    from worldtune.models.family import action_dynamics

    dyn = action_dynamics(spec)

    def latents(row: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {row["clip_id"]: dyn.encode_clip(pipe, read_clip_frames(dataset, row), setup.tier)}

    def actions(row: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {row["clip_id"]: clip_actions(dataset, row, setup)}

    return latents, [lambda row: row["clip_id"]], actions


def encode_task_texts(pipe, spec, setup: DynamicsSetup, batches: list[list[str]], have: set[str], writer) -> int:
    """Cache the action caption ids of every batch of tasks holding one not yet cached; returns how many."""
    from worldtune.console import Progress
    from worldtune.data.latent_cache import prompt_key
    from worldtune.models.family import action_dynamics

    dyn = action_dynamics(spec)
    todo = [b for b in batches if any(prompt_key(p) not in have for p in b)]
    with Progress("cache captions", sum(len(b) for b in todo), "tasks", enabled=bool(todo)) as bar:
        for batch in todo:
            ids = dyn.prompt_ids(pipe, batch, setup.chunk, setup.canvas, setup.fps, setup.view_point,
                                 spec.max_sequence_length)
            writer.save("text", {prompt_key(p): e for p, e in zip(batch, ids)})
            bar.advance(len(batch))
    return sum(len(b) for b in todo)
