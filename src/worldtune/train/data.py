"""What a training run reads: the latent cache, or decoded clips, split into training and held-out sets.

A video run reads `CachedClips` (or `MultiViewCachedClips` for a dataset whose camera views are kept apart) or
`DecodedClips`; an action run (train.task) reads train/action_task.py's sets.
"""

from __future__ import annotations

from pathlib import Path

from worldtune.config import WorldtuneConfig
from worldtune.errors import ConfigError
from worldtune.models.family import family_of


def open_data(cfg: WorldtuneConfig, spec, cache_mode: bool, setup=None):
    """(cache or None, train set, held-out set, dataset info); `setup` = an action run's data setup."""
    from worldtune.data.cache import LatentCache, cache_settings, default_cache_dir
    from worldtune.data.dataset import CachedClips, DecodedClips, read_dataset

    tc = cfg.train
    info, rows = read_dataset(tc.dataset)
    if setup is not None:
        from worldtune.train.action_task import open_action_data

        return open_action_data(cfg, spec, cache_mode, setup, info, rows)
    if not cache_mode:
        if (info.get("layout") or {}).get("type") == "separate":
            raise ConfigError(f"{tc.dataset} has separate camera views: the multi-view model trains from the per-view "
                              f"cache; run `worldtune cache` first")
        if (info.get("streamed") or {}).get("keep_clips") == "val":
            raise ConfigError(f"{tc.dataset} was made by `worldtune prepare --cache`, which keeps only held-out and "
                              f"preview clips as video: train from its cache (train.cache = \"auto\") or prepare "
                              f"again without --cache")
        frames = tc.num_frames or info["num_frames"]
        return None, DecodedClips(tc.dataset, rows, frames, "train"), DecodedClips(tc.dataset, rows, frames, "val"), info
    path = Path(tc.cache) if tc.cache not in (None, "auto") else None
    kinds = family_of(spec).trainable_text_kinds(tc.mode == "full")
    if path is None:  # the family's preferred kind first (Predict2.5 adapters: the projected embedding)
        found = [default_cache_dir(tc.dataset, cache_settings(cfg, info, spec, k)["key"]) for k in kinds]
        path = next((p for p in found if p.is_dir()), found[0])
    cache = LatentCache(path)
    if (info.get("layout") or {}).get("type") == "separate":
        from worldtune.data.multiview_cache import MultiViewCachedClips, dataset_roles

        roles = dataset_roles(info, tc.dataset)
        sets = MultiViewCachedClips(rows, cache, roles, "train"), MultiViewCachedClips(rows, cache, roles, "val")
    else:
        sets = CachedClips(rows, cache, "train"), CachedClips(rows, cache, "val")
    expect = cache_settings(cfg, info, spec, cache.info["text_kind"])
    cache.check({k: expect[k] for k in ("model_id", "height", "width", "num_frames")})
    if cache.info["text_kind"] not in kinds:
        raise ConfigError(f"cache {path} stores {cache.info['text_kind']} text, which train.mode={tc.mode} cannot use "
                          f"(full fine-tuning trains the text projection): run `worldtune cache --cache.text raw`")
    if tc.num_frames not in (None, info["num_frames"]):
        raise ConfigError(f"train.num_frames={tc.num_frames} differs from the cached clips' {info['num_frames']}: "
                          f"unset it or train from decoded clips (--train.cache none)")
    return cache, sets[0], sets[1], info


def cache_available(cfg: WorldtuneConfig, spec) -> bool:
    """Whether the run trains from a latent cache (`train.cache`; auto: one exists for this model and dataset)."""
    if cfg.train.cache is None or str(cfg.train.cache).lower() == "none":
        return False
    if cfg.train.cache != "auto":
        return True
    from worldtune.data.cache import cache_settings, default_cache_dir
    from worldtune.data.dataset import read_dataset

    info, _ = read_dataset(cfg.train.dataset)
    kinds = family_of(spec).trainable_text_kinds(cfg.train.mode == "full")
    return any(default_cache_dir(cfg.train.dataset, cache_settings(cfg, info, spec, k)["key"]).is_dir() for k in kinds)
