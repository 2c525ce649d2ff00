"""`worldtune cache`: VAE latents per clip and text embeddings per unique prompt, computed once.

The diffusers example re-encodes every clip with the VAE (≈1 s at 480p) and every prompt with the
7B text encoder on every step; both are fixed functions of the data, so worldtune pays them once.

Format (a folder, by default `<dataset>/cache/<key>/`):
    info.json                  {"format": "worldtune.cache", "version": 1, "key", "model_id",
                                "text_kind", "dtype", "height", "width", "num_frames", ...}
    latents-NNNNNN.safetensors clip_id -> normalised latents [16, T', H/8, W/8]
    text-NNNNNN.safetensors    sha1(prompt) -> embedding [S, D] ("raw": text encoder output,
                               "projected": Predict2.5's crossattn_proj output)
Every shard is written atomically, so an interrupted run leaves only complete shards and a rerun
continues with the clips and prompts not yet in one. The key hashes the model's VAE/text encoder
identity and the clip settings: a cache made for another model or shape is refused in one line.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from worldtune.atomic import atomic_write_bytes, atomic_write_json, remove_stale_temps
from worldtune.errors import DatasetError
from worldtune.lock import OutputLock

FORMAT, VERSION = "worldtune.cache", 1
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def prompt_key(prompt: str) -> str:
    return hashlib.sha1(prompt.encode("utf-8")).hexdigest()


def cache_key(model_id: str, height: int, width: int, num_frames: int, text_kind: str, max_seq: int,
              fps: float | None = None) -> str:
    """`fps` only where the cached text depends on it (Cosmos 3's duration sentence); else the key is unchanged."""
    blob = json.dumps([model_id, height, width, num_frames, text_kind, max_seq] + ([fps] if fps is not None else []))
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """A safetensors shard, atomically (serialised in memory, then written by the atomic writer)."""
    from safetensors.torch import save

    atomic_write_bytes(path, save({k: v.contiguous().cpu() for k, v in tensors.items()}, metadata=metadata))


class LatentCache:
    """Read access to a cache folder: latents by clip id, text embeddings by prompt."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        info_path = self.root / "info.json"
        if not info_path.is_file():
            raise DatasetError(f"{self.root} is not a worldtune cache (no info.json): run `worldtune cache` first")
        self.info: dict[str, Any] = json.loads(info_path.read_text())
        if self.info.get("format") != FORMAT or self.info.get("version") != VERSION:
            raise DatasetError(f"{info_path}: not a {FORMAT} v{VERSION} cache; rebuild it with `worldtune cache`")
        self._where: dict[str, dict[str, Path]] = {"latents": {}, "text": {}}
        for kind in self._where:
            for shard in sorted(self.root.glob(f"{kind}-*.safetensors")):
                from safetensors import safe_open

                with safe_open(str(shard), framework="pt") as st:
                    for k in st.keys():
                        self._where[kind][k] = shard

    @property
    def clip_ids(self) -> set[str]:
        return set(self._where["latents"])

    @property
    def prompt_keys(self) -> set[str]:
        return set(self._where["text"])

    def _get(self, kind: str, key: str) -> torch.Tensor:
        from safetensors import safe_open

        try:
            shard = self._where[kind][key]
        except KeyError:
            raise DatasetError(f"{self.root}: no cached {kind} for '{key}'; rerun `worldtune cache`") from None
        with safe_open(str(shard), framework="pt") as st:
            return st.get_tensor(key)

    def latents(self, clip_id: str) -> torch.Tensor:
        return self._get("latents", clip_id)

    def text(self, prompt: str) -> torch.Tensor:
        return self._get("text", prompt_key(prompt))

    def check(self, expect: dict[str, Any]) -> None:
        """Refuse a cache made for another model or shape, naming what differs and the fix."""
        for k, v in expect.items():
            if self.info.get(k) != v:
                raise DatasetError(
                    f"cache {self.root} was made with {k}={self.info.get(k)!r} but this run needs {v!r}: "
                    f"run `worldtune cache` for this model/settings or point train.cache elsewhere"
                )


def cache_settings(cfg, dataset_info: dict[str, Any], spec, text_kind: str) -> dict[str, Any]:
    """The identity a cache is keyed and checked by."""
    from worldtune.models.load import model_id

    from worldtune.models.family import family_of

    mid = model_id(cfg.model.name, cfg.model.path, cfg.model.seed, cfg.model.revision,
                   text_projection=text_kind == "projected")
    h, w, f = dataset_info["height"], dataset_info["width"], dataset_info["num_frames"]
    fps = float(dataset_info.get("fps") or spec.fps) if family_of(spec).text_depends_on_clip else None
    return dict(model_id=mid, height=h, width=w, num_frames=f, text_kind=text_kind,
                max_sequence_length=spec.max_sequence_length, **({"fps": fps} if fps is not None else {}),
                key=cache_key(mid, h, w, f, text_kind, spec.max_sequence_length, fps))


def default_cache_dir(dataset: str | Path, key: str) -> Path:
    return Path(dataset) / "cache" / key


def _row_encoder(dataset: str, info: dict[str, Any], vae):
    """What one manifest row caches: {key: latents}, for packed (grid/single) or separate views."""
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


def run(cfg) -> dict[str, Any]:
    """Encode every clip (every view of it, for separate-views datasets) and every unique prompt."""
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    from worldtune.data.dataset import read_dataset
    from worldtune.models.family import family_of
    from worldtune.models.load import load_pipeline

    ccfg = cfg.cache
    info, manifest = read_dataset(ccfg.dataset)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if ccfg.device == "auto" else ccfg.device
    pipe, spec = load_pipeline(cfg.model.name, cfg.model.path, dtype="bf16" if device == "cuda" else "fp32",
                               device=device, seed=cfg.model.seed, revision=cfg.model.revision,
                               random_weights=cfg.model.random_weights)
    encode_row, keys_of, extra = _row_encoder(ccfg.dataset, info, pipe.vae)
    family = family_of(spec)
    text_kind = family.resolve_text_kind(ccfg.text)
    settings = cache_settings(cfg, info, spec, text_kind)
    out = Path(ccfg.out) if ccfg.out else default_cache_dir(ccfg.dataset, settings["key"])
    with OutputLock(out, "cache"):  # one live run per cache folder
        remove_stale_temps(out)
        info_out = {"format": FORMAT, "version": VERSION, **settings, "dtype": ccfg.dtype,
                    "dataset": str(Path(ccfg.dataset).resolve()), "family": spec.family, **extra}
        if (out / "info.json").is_file():
            LatentCache(out).check({k: info_out[k] for k in ("key", "model_id", "text_kind", "dtype")})
        else:
            atomic_write_json(out / "info.json", info_out)
        cache = LatentCache(out)
        store = DTYPES[ccfg.dtype]
        todo = [r for r in manifest if not all(k(r) in cache.clip_ids for k in keys_of)]
        failed: list[str] = []
        shard = len(list(out.glob("latents-*.safetensors")))
        for start in track(range(0, len(todo), ccfg.batch_size), description="VAE latents", transient=True):
            tensors = {}
            for row in todo[start:start + ccfg.batch_size]:
                try:
                    tensors.update({k: v.to(store) for k, v in encode_row(row).items()})
                except DatasetError as e:
                    failed.append(f"{row['clip_id']}: {e}")
            if tensors:
                _atomic_save(tensors, out / f"latents-{shard:06d}.safetensors")
                shard += 1
        prompts = sorted({r["prompt"] for r in manifest} | {""})
        todo_p = [p for p in prompts if prompt_key(p) not in cache.prompt_keys]
        tshard = len(list(out.glob("text-*.safetensors")))
        for start in track(range(0, len(todo_p), ccfg.batch_size), description="text embeddings", transient=True):
            batch = todo_p[start:start + ccfg.batch_size]
            emb = family.encode_prompts(pipe, batch, text_kind, num_frames=info["num_frames"], height=info["height"],
                                        width=info["width"], fps=float(info.get("fps") or spec.fps))
            _atomic_save({prompt_key(p): e.to(store) if e.is_floating_point() else e for p, e in zip(batch, emb)}, out / f"text-{tshard:06d}.safetensors")
            tshard += 1
        summary = {"cache": str(out), "clips": len(manifest), "views": ",".join(extra.get("views", [])) or "packed",
                   "encoded": len(todo) - len(failed), "already": len(manifest) - len(todo), "failed": len(failed),
                   "prompts": len(prompts), "new_prompts": len(todo_p), "text_kind": text_kind, "device": device}
    table = Table(title="worldtune cache")
    table.add_column("item")
    table.add_column("value")
    for k, v in summary.items():
        table.add_row(k, str(v))
    Console().print(table)
    for f in failed:
        Console(stderr=True).print(f"[yellow]skipped[/] {f}")
    return summary
