"""A latent cache folder as readers see it: its format marks, the keys it stores things under, `LatentCache`.

`worldtune cache` (data/cache.py) writes the folder; training, the action tasks (data/dynamics.py) and the
multi-view reader (data/multiview_cache.py) read it through this module, which imports none of them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from worldtune.errors import DatasetError

FORMAT, VERSION = "worldtune.cache", 1
INDEX = "index.json"
KINDS = ("latents", "text", "actions")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def prompt_key(prompt: str) -> str:
    return hashlib.sha1(prompt.encode("utf-8")).hexdigest()


def _shard_keys(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as st:
        return list(st.keys())


def locate_keys(root: Path) -> dict[str, dict[str, Path]]:
    """kind -> {key: shard}: from the merged index for the shards it names, from headers for the rest."""
    try:
        index = json.loads((root / INDEX).read_text())
    except (OSError, ValueError):
        index = {}
    where: dict[str, dict[str, Path]] = {k: {} for k in KINDS}
    for kind in KINDS:
        files = {p.name: p for p in sorted(root.glob(f"{kind}-*.safetensors"))}
        listed = {k: n for k, n in (index.get(kind) or {}).items() if n in files}
        covered = set(listed.values())
        for name, path in files.items():
            if name not in covered:
                where[kind].update(dict.fromkeys(_shard_keys(path), path))
        where[kind].update({k: files[n] for k, n in listed.items()})
    return where


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
        self._where = locate_keys(self.root)
        self._open: dict[Path, Any] = {}  # shard -> open reader: a shard's header is parsed once, not per item

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_open": {}}  # readers are not picklable; a worker process opens its own

    @property
    def clip_ids(self) -> set[str]:
        return set(self._where["latents"])

    @property
    def prompt_keys(self) -> set[str]:
        return set(self._where["text"])

    @property
    def action_ids(self) -> set[str]:
        return set(self._where["actions"])

    def _get(self, kind: str, key: str) -> torch.Tensor:
        from safetensors import safe_open

        try:
            shard = self._where[kind][key]
        except KeyError:
            raise DatasetError(f"{self.root}: no cached {kind} for '{key}'; rerun `worldtune cache`") from None
        reader = self._open.get(shard)
        if reader is None:
            reader = self._open[shard] = safe_open(str(shard), framework="pt")
        return reader.get_tensor(key)

    def latents(self, clip_id: str) -> torch.Tensor:
        return self._get("latents", clip_id)

    def text(self, prompt: str) -> torch.Tensor:
        return self._get("text", prompt_key(prompt))

    def actions(self, clip_id: str) -> torch.Tensor:
        return self._get("actions", clip_id)

    def check(self, expect: dict[str, Any]) -> None:
        """Refuse a cache made for another model or shape, naming what differs and the fix."""
        for k, v in expect.items():
            if self.info.get(k) != v:
                raise DatasetError(
                    f"cache {self.root} was made with {k}={self.info.get(k)!r} but this run needs {v!r}: "
                    f"run `worldtune cache` for this model/settings or point train.cache elsewhere"
                )


def clip_fps(dataset_info: dict[str, Any], spec) -> float:
    """The prepared clips' frame rate (the spec's default for a dataset that does not record one)."""
    return float(dataset_info.get("fps") or spec.fps)


def default_cache_dir(dataset: str | Path, key: str) -> Path:
    return Path(dataset) / "cache" / key
