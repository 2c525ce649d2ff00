"""Latent cache of a separate-views dataset, and read access to it for the multi-view model.

`worldtune prepare` with `layout = "separate"` writes one mp4 per camera and clip
(`clips/<clip_id>/<role>.mp4`; the manifest's `views` column is JSON role -> relative path) and
no packed `video`. This module encodes every view with the VAE into the ordinary cache format of
`worldtune.data.cache` (same folder, key, info.json and text shards), storing each view's latents
under the key `<clip_id>/<role>`. The trainer finds the folder exactly as for a packed dataset;
`MultiViewCachedClips` then hands it clips whose latents are the views stacked along time
[C, V·T, H/8, W/8] (`worldtune.models.multiview.stack_views`), in the dataset layout's role order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldtune.data.cache import (
    DTYPES, FORMAT, VERSION, LatentCache, _atomic_save, cache_settings, default_cache_dir, encode_prompts,
    prompt_key, resolve_text_kind)
from worldtune.errors import DatasetError


def view_key(clip_id: str, role: str) -> str:
    """Cache key of one view's latents."""
    return f"{clip_id}/{role}"


def dataset_roles(info: dict[str, Any], root: str | Path = "dataset") -> list[str]:
    """The camera roles of a separate-views dataset, in the order the views are stacked."""
    layout = info.get("layout") or {}
    if layout.get("type") != "separate":
        raise DatasetError(f"{root}/info.json: layout is {layout.get('type')!r}, the multi-view model needs a dataset "
                           f"prepared with prepare.layout = \"separate\"")
    return list(layout["roles"])


def view_paths(row: dict[str, Any]) -> dict[str, str]:
    """role -> relative mp4 path of one manifest row."""
    if not row.get("views"):
        raise DatasetError(f"clip {row.get('clip_id')} has no per-view videos (manifest column `views`): "
                           f"prepare the dataset with prepare.layout = \"separate\"")
    return json.loads(row["views"])


def read_view_frames(root: str | Path, row: dict[str, Any], roles: list[str]) -> dict[str, np.ndarray]:
    """{role: frames [T, H, W, 3]} of one clip; a missing view is a DatasetError naming it."""
    from worldtune.data.video import read_frames

    paths = view_paths(row)
    missing = [r for r in roles if r not in paths]
    if missing:
        raise DatasetError(f"clip {row['clip_id']} lacks views {missing} (it has {sorted(paths)})")
    return {r: read_frames(Path(root) / paths[r]) for r in roles}


def encode_views(vae, frames: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """{role: frames} -> {role: normalised latents [C, T', H/8, W/8]} (one VAE call for all views)."""
    from worldtune.models.latents import encode, frames_to_pixels

    roles = list(frames)
    lat = encode(vae, torch.stack([frames_to_pixels(frames[r]) for r in roles]))
    return dict(zip(roles, lat))


def run(cfg) -> dict[str, Any]:
    """Encode every view of every clip of a separate-views dataset, and every unique prompt.

    The counterpart of `worldtune.data.cache.run` (same config section `cache`, same folder and
    info.json, resumable shard by shard); a clip with an unreadable or missing view is skipped
    and counted.
    """
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    from worldtune.data.dataset import read_dataset
    from worldtune.models.load import load_pipeline

    ccfg = cfg.cache
    info, manifest = read_dataset(ccfg.dataset)
    roles = dataset_roles(info, ccfg.dataset)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if ccfg.device == "auto" else ccfg.device
    pipe, spec = load_pipeline(cfg.model.name, cfg.model.path, dtype="bf16" if device == "cuda" else "fp32",
                               device=device, seed=cfg.model.seed)
    text_kind = resolve_text_kind(ccfg.text, spec.family)
    settings = cache_settings(cfg, info, spec, text_kind)
    out = Path(ccfg.out) if ccfg.out else default_cache_dir(ccfg.dataset, settings["key"])
    out.mkdir(parents=True, exist_ok=True)
    info_out = {"format": FORMAT, "version": VERSION, **settings, "dtype": ccfg.dtype,
                "dataset": str(Path(ccfg.dataset).resolve()), "family": spec.family,
                "layout": "separate", "views": roles}
    if (out / "info.json").is_file():
        LatentCache(out).check({k: info_out[k] for k in ("key", "model_id", "text_kind", "dtype")})
    else:
        (out / "info.json").write_text(json.dumps(info_out, indent=1))
    cache = LatentCache(out)
    store = DTYPES[ccfg.dtype]
    todo = [r for r in manifest if not all(view_key(r["clip_id"], role) in cache.clip_ids for role in roles)]
    failed: list[str] = []
    shard = len(list(out.glob("latents-*.safetensors")))
    for start in track(range(0, len(todo), ccfg.batch_size), description="VAE latents (per view)", transient=True):
        tensors = {}
        for row in todo[start:start + ccfg.batch_size]:
            try:
                frames = read_view_frames(ccfg.dataset, row, roles)
            except DatasetError as e:
                failed.append(f"{row['clip_id']}: {e}")
                continue
            for role, lat in encode_views(pipe.vae, frames).items():
                tensors[view_key(row["clip_id"], role)] = lat.to(store)
        if tensors:
            _atomic_save(tensors, out / f"latents-{shard:06d}.safetensors")
            shard += 1
    prompts = sorted({r["prompt"] for r in manifest} | {""})
    todo_p = [p for p in prompts if prompt_key(p) not in cache.prompt_keys]
    tshard = len(list(out.glob("text-*.safetensors")))
    for start in track(range(0, len(todo_p), ccfg.batch_size), description="text embeddings", transient=True):
        batch = todo_p[start:start + ccfg.batch_size]
        emb = encode_prompts(pipe, spec, batch, text_kind)
        _atomic_save({prompt_key(p): e.to(store) for p, e in zip(batch, emb)}, out / f"text-{tshard:06d}.safetensors")
        tshard += 1
    summary = {"cache": str(out), "clips": len(manifest), "views": ",".join(roles),
               "encoded": len(todo) - len(failed), "already": len(manifest) - len(todo), "failed": len(failed),
               "prompts": len(prompts), "new_prompts": len(todo_p), "text_kind": text_kind, "device": device}
    table = Table(title="worldtune cache (separate views)")
    table.add_column("item")
    table.add_column("value")
    for k, v in summary.items():
        table.add_row(k, str(v))
    Console().print(table)
    for f in failed:
        Console(stderr=True).print(f"[yellow]skipped[/] {f}")
    return summary


class MultiViewCachedClips:
    """Clips of one split with every view cached; items are {"latents": [C, V·T, h, w], "text", ...}.

    A drop-in for `worldtune.data.dataset.CachedClips` when training the multi-view model.
    """

    def __init__(self, rows: list[dict[str, Any]], cache: LatentCache, roles: list[str], split: str = "train"):
        self.cache, self.roles = cache, list(roles)
        have = cache.clip_ids
        self.rows = [r for r in rows if r.get("split", "train") == split
                     and all(view_key(r["clip_id"], role) in have for role in self.roles)]

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def num_views(self) -> int:
        return len(self.roles)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from worldtune.models.multiview import stack_views

        row = self.rows[i]
        views = {r: self.cache.latents(view_key(row["clip_id"], r)).float() for r in self.roles}
        return {"latents": stack_views(views, self.roles), "text": self.cache.text(row["prompt"]).float(),
                "clip_id": row["clip_id"], "prompt": row["prompt"]}
