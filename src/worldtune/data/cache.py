"""`worldtune cache`: VAE latents per clip and text embeddings per unique prompt, computed once.

The diffusers example re-encodes every clip with the VAE (≈1 s at 480p) and every prompt with the
7B text encoder on every step; both are fixed functions of the data, so worldtune pays them once.

Format (a folder, by default `<dataset>/cache/<key>/`):
    info.json                        {"format": "worldtune.cache", "version": 1, "key", "model_id",
                                      "text_kind", "dtype", "height", "width", "num_frames", ...}
    latents-rRRR-NNNNNN.safetensors  clip_id -> normalised latents [16, T', H/8, W/8] (process RRR's shards)
    text-rRRR-NNNNNN.safetensors     sha1(prompt) -> embedding [S, D] ("raw": text encoder output,
                                     "projected": Predict2.5's crossattn_proj output)
    actions-rRRR-NNNNNN.safetensors  forward dynamics only (`train.task`): clip_id -> normalised action
                                     chunk [F-1, D]; the text is then the action caption of each clip's
                                     task, the latents those of the tier's canvas (data/dynamics.py)
    index.json                       key -> shard file for every shard, written once every process finished
Every shard is written atomically, so an interrupted run leaves only complete shards and a rerun
continues with the clips and prompts not yet in one. The key hashes the model's VAE/text encoder
identity and the clip settings: a cache made for another model or shape is refused in one line.

Several processes (torchrun, SLURM tasks; `RANK`/`WORLD_SIZE` or `SLURM_PROCID`/`SLURM_NTASKS`)
split the work without talking to each other, as generation does (`worldtune.infer.sharding`):
process r encodes every W-th clip of the sorted clip ids and every W-th batch of the sorted
prompts, on GPU `LOCAL_RANK`, into its own shards. Each process marks itself done; the one that
finds every process of its run done writes the merged `index.json`. Readers trust the index only
for the shards it names and read the header of any other shard, so a stale or missing index is
never wrong, only slower to open.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from worldtune.atomic import TMP_MARK, atomic_write_bytes, atomic_write_json
from worldtune.config import ACTION_TASKS
from worldtune.data.latent_cache import (DTYPES, FORMAT, INDEX, KINDS, VERSION, LatentCache,  # noqa: F401 (re-exported)
                                         clip_fps, default_cache_dir, locate_keys, prompt_key)
from worldtune.errors import DatasetError
from worldtune.lock import OutputLock

RowEncoder = Callable[[dict[str, Any]], dict[str, torch.Tensor]]


def cache_key(model_id: str, height: int, width: int, num_frames: int, text_kind: str, max_seq: int,
              fps: float | None = None, task: dict[str, Any] | None = None) -> str:
    """`fps` only where the cached text depends on it (Cosmos 3's duration sentence), `task` only for a forward-
    dynamics cache (tier, canvas, view point); else the key is unchanged."""
    blob = json.dumps([model_id, height, width, num_frames, text_kind, max_seq] + ([fps] if fps is not None else [])
                      + ([task] if task else []), sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """A safetensors shard, atomically (serialised in memory, then written by the atomic writer)."""
    from safetensors.torch import save

    atomic_write_bytes(path, save({k: v.contiguous().cpu() for k, v in tensors.items()}, metadata=metadata))


def cache_settings(cfg, dataset_info: dict[str, Any], spec, text_kind: str) -> dict[str, Any]:
    """The identity a cache is keyed and checked by."""
    from worldtune.models.load import model_id

    from worldtune.models.family import family_of

    mid = model_id(cfg.model.name, cfg.model.path, cfg.model.seed, cfg.model.revision,
                   text_projection=text_kind == "projected")
    h, w, f = dataset_info["height"], dataset_info["width"], dataset_info["num_frames"]
    fps = clip_fps(dataset_info, spec) if family_of(spec).text_depends_on_clip else None
    task: dict[str, Any] = {}
    if cfg.train.task in ACTION_TASKS:  # one action cache for every action task
        from worldtune.data.dynamics import key_settings

        task = key_settings(cfg, dataset_info, spec)
    return dict(model_id=mid, height=h, width=w, num_frames=f, text_kind=text_kind,
                max_sequence_length=spec.max_sequence_length, **({"fps": fps} if fps is not None else {}), **task,
                key=cache_key(mid, h, w, f, text_kind, spec.max_sequence_length, fps, task))


# ------------------------------------------------------------------------------------ writing
class ShardWriter:
    """Appends the shards of one process: `<kind>-r<rank>-<n>.safetensors`, each written atomically.

    Names carry the rank so processes never collide; numbering continues after the highest shard
    this rank left in an earlier run (a killed run leaves whole shards only).
    """

    def __init__(self, root: Path, rank: int, store: torch.dtype):
        self.root, self.rank, self.store = root, rank, store
        pat = re.compile(rf"({'|'.join(KINDS)})-r{rank:03d}-(\d+)\.safetensors")
        self.next = dict.fromkeys(KINDS, 0)
        for p in root.glob(f"*-r{rank:03d}-*.safetensors"):
            if m := pat.fullmatch(p.name):
                self.next[m.group(1)] = max(self.next[m.group(1)], int(m.group(2)) + 1)

    def save(self, kind: str, tensors: dict[str, torch.Tensor]) -> Path:
        path = self.root / f"{kind}-r{self.rank:03d}-{self.next[kind]:06d}.safetensors"
        # floats in the store dtype; integers (Cosmos 3's text-token ids) and action chunks (small; bf16 would
        # round a normalised action to 3 digits) as they are
        keep = kind == "actions"
        _atomic_save({k: v.to(self.store) if v.is_floating_point() and not keep else v for k, v in tensors.items()},
                     path)
        self.next[kind] += 1
        return path

    def remove_stale_temps(self) -> None:
        """Temp files of this rank's shards left by a killed run (other ranks' temps may be live)."""
        for kind in KINDS:
            for p in self.root.glob(f".{kind}-r{self.rank:03d}-*{TMP_MARK}*"):
                p.unlink(missing_ok=True)


@dataclass
class Encoded:
    """What one process did: keys written, clips that failed (clip id -> reason)."""

    clips: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def encode_clips(rows: Iterable[dict[str, Any]], encode_row: RowEncoder, writer: ShardWriter,
                 batch_size: int, progress: bool = True, actions: RowEncoder | None = None) -> Encoded:
    """Encode `rows` (each whole clip: every key it caches), `batch_size` clips to a shard; with `actions`
    (forward dynamics) each clip's action chunk too, into an actions shard written before the latents shard
    (a clip counts as cached once its latents are, so a kill between the two only repeats the actions).

    A clip the dataset cannot give (unreadable mp4, missing view, broken action file) is skipped and counted."""
    from worldtune.console import Progress

    rows = list(rows)
    done = Encoded()
    with Progress("cache latents", len(rows), "clips", enabled=bool(rows and progress)) as bar:
        for start in range(0, len(rows), batch_size):
            tensors: dict[str, torch.Tensor] = {}
            chunks: dict[str, torch.Tensor] = {}
            for row in rows[start:start + batch_size]:
                try:
                    side = actions(row) if actions is not None else {}
                    tensors.update(encode_row(row))
                    chunks.update(side)
                    done.clips += 1
                except DatasetError as e:
                    done.failed[row["clip_id"]] = str(e)
                bar.advance()
            if chunks:
                writer.save("actions", chunks)
            if tensors:
                writer.save("latents", tensors)
    return done


def prompt_batches(prompts: Iterable[str], batch_size: int, rank: int = 0, world: int = 1) -> list[list[str]]:
    """Process `rank`'s batches of the sorted unique prompts.

    The batches are cut before they are shared out, so a prompt is encoded in the same batch for
    any number of processes (and a rerun re-encodes a batch whole): the embeddings are identical.
    """
    ordered = sorted(set(prompts))
    batches = [ordered[i:i + batch_size] for i in range(0, len(ordered), batch_size)]
    return batches[rank::world]


def encode_texts(pipe, spec, batches: list[list[str]], text_kind: str, have: set[str], writer: ShardWriter,
                 info: dict[str, Any]) -> int:
    """Encode every batch that holds a prompt not yet cached (for the clips `info` describes: Cosmos 3's
    text depends on their shape and fps); returns how many prompts were encoded."""
    from worldtune.console import Progress
    from worldtune.models.family import family_of

    family = family_of(spec)
    clip = dict(num_frames=info["num_frames"], height=info["height"], width=info["width"], fps=clip_fps(info, spec))
    todo = [b for b in batches if any(prompt_key(p) not in have for p in b)]
    with Progress("cache text", sum(len(b) for b in todo), "prompts", enabled=bool(todo)) as bar:
        for batch in todo:
            emb = family.encode_prompts(pipe, batch, text_kind, **clip)
            writer.save("text", {prompt_key(p): e for p, e in zip(batch, emb)})
            bar.advance(len(batch))
    return sum(len(b) for b in todo)


# ------------------------------------------------------------------------------ processes
def run_id() -> str:
    """What the processes of one launch share (torchrun's run id, SLURM's job and step), else ''."""
    env = os.environ
    if env.get("TORCHELASTIC_RUN_ID"):
        return env["TORCHELASTIC_RUN_ID"]
    if env.get("SLURM_JOB_ID"):
        return f"{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '')}"
    return ""


def _marker(root: Path, rank: int) -> Path:
    return root / f".rank{rank}.done"


def start_rank(root: Path, rank: int) -> None:
    """Not done yet, and no index: it is rewritten once every process of this launch has finished."""
    _marker(root, rank).unlink(missing_ok=True)
    (root / INDEX).unlink(missing_ok=True)


def finish_rank(root: Path, rank: int, world: int, failed: dict[str, str]) -> Path | None:
    """Mark this process done; if every process of this run is, write the merged index (returned)."""
    atomic_write_json(_marker(root, rank), {"world": world, "run": run_id(), "failed": failed})
    marks = []
    for r in range(world):
        try:
            marks.append(json.loads(_marker(root, r).read_text()))
        except (OSError, ValueError):
            return None
    if any(m.get("world") != world or m.get("run") != run_id() for m in marks):
        return None
    return write_index(root, {k: v for m in marks for k, v in (m.get("failed") or {}).items()})


def write_index(root: Path, failed: dict[str, str] | None = None) -> Path:
    """index.json: every key of every shard now in the folder -> its shard file (atomic, idempotent)."""
    where = locate_keys(root)
    index = {"format": "worldtune.cache.index", "version": 1, "failed": dict(sorted((failed or {}).items())),
             **{kind: {k: p.name for k, p in sorted(where[kind].items())} for kind in KINDS}}
    return atomic_write_json(root / INDEX, index, indent=None)


# -------------------------------------------------------------------------------------- stage
def row_encoder(dataset: str | Path, info: dict[str, Any], vae) -> tuple[RowEncoder, list[Callable], dict]:
    """What one manifest row caches: {key: latents}, for packed (grid/single) or separate views.

    Returns (encode a row, the key functions of a row, extra info.json fields)."""
    from worldtune.data.dataset import read_clip_frames
    from worldtune.models.latents import encode, frames_to_pixels

    if (info.get("layout") or {}).get("type") == "separate":
        from worldtune.data.multiview_cache import dataset_roles, encode_views, read_view_frames, view_key

        roles = dataset_roles(info, dataset)

        def views(row: dict[str, Any]) -> dict[str, torch.Tensor]:
            lat = encode_views(vae, read_view_frames(dataset, row, roles))
            return {view_key(row["clip_id"], r): v for r, v in lat.items()}
        return views, [lambda row, r=r: view_key(row["clip_id"], r) for r in roles], {"layout": "separate",
                                                                                      "views": roles}

    def packed(row: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {row["clip_id"]: encode(vae, frames_to_pixels(read_clip_frames(dataset, row)).unsqueeze(0))[0]}
    return packed, [lambda row: row["clip_id"]], {}


def check_model_size(cfg, height: int, width: int, layout: dict | None, what: str, fix: str) -> None:
    """Refuse clips `cfg.model` cannot take, in one line naming the sizes it can (before the model is loaded).

    Why at cache time: a VAE fed other sizes crops the latents silently (Predict) or fails deep inside
    (Cosmos 3), and training refuses them anyway, after the whole cache was computed."""
    from worldtune.data.frame_size import check_model_frame_size
    from worldtune.models.family import family_of
    from worldtune.models.load import resolve_spec

    family = family_of(resolve_spec(cfg.model.name, cfg.model.path, cfg.model.revision))
    check_model_frame_size(height, width, layout, family.pixel_multiple, family.label, what, fix)


def device_for(name: str, local_rank: int) -> str:
    """auto (or a bare 'cuda') -> this process's GPU, else the CPU; anything else as given."""
    if name in ("auto", "cuda"):
        return f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    return name


@dataclass
class Encoder:
    """The loaded models and settings a cache is written with (shared by `cache` and `prepare --cache`)."""

    pipe: Any
    spec: Any
    device: str
    text_kind: str
    vae_mode: str
    store: torch.dtype


def load_encoder(cfg, local_rank: int = 0) -> Encoder:
    """Load the pipeline on this process's device and switch its VAE to the configured mode."""
    from worldtune.models.load import load_pipeline
    from worldtune.models.vae_modes import apply_vae_mode, resolve_vae_mode

    ccfg = cfg.cache
    device = device_for(ccfg.device, local_rank)
    cuda = torch.device(device).type == "cuda"
    vae_dtype = ccfg.vae_dtype if ccfg.vae_dtype != "auto" else ("bf16" if cuda else "fp32")
    from worldtune.console import setting_up

    with setting_up("cache", "loading model"):
        pipe, spec = load_pipeline(cfg.model.name, cfg.model.path, dtype="bf16" if cuda else "fp32",
                                   vae_dtype=vae_dtype, device=device, seed=cfg.model.seed, revision=cfg.model.revision,
                                   random_weights=cfg.model.random_weights)
    mode = resolve_vae_mode(ccfg.vae_mode, device)
    apply_vae_mode(pipe.vae, mode)
    from worldtune.models.family import family_of

    return Encoder(pipe, spec, device, family_of(spec).resolve_text_kind(ccfg.text), mode, DTYPES[ccfg.dtype])


def open_cache(cfg, enc: Encoder, dataset: str | Path, info: dict[str, Any], extra: dict[str, Any]) -> Path:
    """The cache folder for this dataset and model: created with its info.json, or checked against it."""
    settings = cache_settings(cfg, info, enc.spec, enc.text_kind)
    out = Path(cfg.cache.out) if cfg.cache.out else default_cache_dir(dataset, settings["key"])
    info_out = {"format": FORMAT, "version": VERSION, **settings, "dtype": cfg.cache.dtype,
                "dataset": str(Path(dataset).resolve()), "family": enc.spec.family, **extra}
    if (out / "info.json").is_file():
        checked = ("key", "model_id", "text_kind", "dtype") + (("action_stats",) if "action_stats" in info_out else ())
        LatentCache(out).check({k: info_out[k] for k in checked})
    else:
        atomic_write_json(out / "info.json", info_out)
    return out


def run(cfg) -> dict[str, Any]:
    """Encode this process's share of the clips (every view, for separate-views datasets) and prompts."""
    from worldtune.data.dataset import read_dataset
    from worldtune.infer.sharding import process_index, shard

    ccfg = cfg.cache
    rank, world, local_rank = process_index()
    info, manifest = read_dataset(ccfg.dataset)
    setup = None
    if cfg.train.task in ACTION_TASKS:  # latents on the action canvas, action chunks, action captions
        from worldtune.data import dynamics
        from worldtune.models.load import resolve_spec

        setup = dynamics.resolve(cfg, info, ccfg.dataset, resolve_spec(cfg.model.name, cfg.model.path,
                                                                       cfg.model.revision))
    else:  # latents of the clips as they are: before loading the model, refuse a size it cannot take
        check_model_size(cfg, info["height"], info["width"], info.get("layout"),
                         f"dataset {ccfg.dataset} has frames of", "prepare it again with")
    enc = load_encoder(cfg, local_rank)
    actions = None
    if setup is None:
        encode_row, keys_of, extra = row_encoder(ccfg.dataset, info, enc.pipe.vae)
    else:
        encode_row, keys_of, actions = dynamics.cache_encoders(ccfg.dataset, enc.pipe, enc.spec, setup)
        extra = setup.cache_info()
    out = open_cache(cfg, enc, ccfg.dataset, info, extra)
    with OutputLock(out, "cache", name=f".worldtune-rank{rank}.lock"):  # one live run per folder and rank
        writer = ShardWriter(out, rank, enc.store)
        writer.remove_stale_temps()
        start_rank(out, rank)
        cache = LatentCache(out)
        have = cache.clip_ids & cache.action_ids if setup is not None else cache.clip_ids
        mine = shard(manifest, rank, world, key=lambda r: r["clip_id"])
        todo = [r for r in mine if not all(k(r) in have for k in keys_of)]
        done = encode_clips(todo, encode_row, writer, ccfg.batch_size, actions=actions)
        if setup is None:
            batches = prompt_batches([r["prompt"] for r in manifest] + [""], ccfg.text_batch_size, rank, world)
            new_prompts = encode_texts(enc.pipe, enc.spec, batches, enc.text_kind, cache.prompt_keys, writer, info)
        else:
            batches = prompt_batches([dynamics.task_text(r) for r in manifest], ccfg.text_batch_size, rank, world)
            new_prompts = dynamics.encode_task_texts(enc.pipe, enc.spec, setup, batches, cache.prompt_keys, writer)
        index = finish_rank(out, rank, world, done.failed)
    summary = {"cache": str(out), "task": cfg.train.task, "process": f"{rank}/{world}", "clips": len(manifest),
               "mine": len(mine),
               "views": ",".join(extra.get("views", [])) or "packed", "encoded": done.clips,
               "already": len(mine) - len(todo), "failed": len(done.failed), "new_prompts": new_prompts,
               "text_kind": enc.text_kind, "device": enc.device, "vae_mode": enc.vae_mode,
               "index": str(index) if index else "waiting for the other processes"}
    print_summary(summary, done.failed)
    return summary


def print_summary(summary: dict[str, Any], failed: dict[str, str]) -> None:
    from rich.console import Console

    from worldtune.console import summary_table

    summary_table("worldtune cache", summary)
    for clip, why in failed.items():
        Console(stderr=True).print(f"[yellow]skipped[/] {clip}: {why}")
