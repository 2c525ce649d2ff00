"""diffusers' step caches (first-block cache, TaylorSeer) on both Cosmos families, through the hooks' own registry.

A step cache skips transformer work on denoising steps it judges close to one already computed (a labelled speed
option: the frames differ from the uncached model's). diffusers keeps them as hooks on a transformer's repeated
blocks, which read each block's inputs and outputs through `TransformerBlockRegistry` metadata. In diffusers 0.42.1
(`FIXES_DIFFUSERS`) neither family works out of the box:

- Cosmos-Predict2.5's `CosmosTransformerBlock` is not registered at all, so the first-block cache refuses it;
- Cosmos 3's `Cosmos3VLTextMoTDecoderLayer` is registered with its argument names (`gen_seq`, `und_seq`), but the
  first-block cache asks the metadata for the literal names `hidden_states` / `encoder_hidden_states` ("Parameter
  'hidden_states' not found in function signature");
- TaylorSeer's default module patterns (`transformer_blocks.*attn`) match no module of Cosmos 3's `layers`, so its
  defaults change nothing.

The patch here is one metadata class that maps the generic names to the block's own argument names, registered
for the block classes a transformer really runs (worldtune's speed switches put blocks in a `Speed` subclass, which
an exact-class registry lookup would miss), and TaylorSeer's patterns made from the transformer's own block list.
`tests/models/test_step_cache.py` checks that diffusers still needs it.

Samplers wrap each transformer call in `step_context` (the cache keeps one state per guidance branch, the way
diffusers' pipelines call `cache_context`) and call `reset_step_cache` before each video or chunk.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

import torch
from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry

from worldtune.errors import ConfigError

FIXES_DIFFUSERS = "0.42.1"  # the diffusers release whose block registry this patch completes
ATTR = "_worldtune_step_cache"  # the label of the cache on a transformer that has one


class NamedBlockMetadata(TransformerBlockMetadata):
    """Block metadata whose generic `hidden_states` / `encoder_hidden_states` requests resolve to the block's own
    argument names (diffusers 0.42.1's first-block cache asks for the generic ones)."""

    def _get_parameter_from_args_kwargs(self, identifier: str, args=(), kwargs=None):
        own = {"hidden_states": self.hidden_states_argument_name,
               "encoder_hidden_states": self.encoder_hidden_states_argument_name}
        return super()._get_parameter_from_args_kwargs(own.get(identifier, identifier), args, kwargs)


# block class name -> (index of the video stream in its output, of the text stream or None, their argument names)
BLOCKS: dict[str, tuple[int, int | None, str, str]] = {
    "CosmosTransformerBlock": (0, None, "hidden_states", "encoder_hidden_states"),  # Predict2 / Predict2.5
    "Cosmos3VLTextMoTDecoderLayer": (1, 0, "gen_seq", "und_seq"),  # Cosmos 3: returns (und_seq, gen_seq)
}


def block_list(transformer: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    """The transformer's repeated blocks as the hooks find them: (child name, the ModuleList)."""
    from diffusers.hooks._common import _ALL_TRANSFORMER_BLOCK_IDENTIFIERS

    for name, child in transformer.named_children():
        if name in _ALL_TRANSFORMER_BLOCK_IDENTIFIERS and isinstance(child, torch.nn.ModuleList) and len(child) > 1:
            return name, child
    raise ConfigError(f"{type(transformer).__name__} has no list of repeated blocks diffusers' step caches can hook")


def register_blocks(transformer: torch.nn.Module) -> None:
    """Register every block class the transformer runs, with metadata naming its real arguments and outputs."""
    for cls in {type(b) for b in block_list(transformer)[1]}:
        base = next((c for c in cls.__mro__ if c.__name__ in BLOCKS), None)
        if base is None:
            raise ConfigError(f"{cls.__name__}: no step cache for this block; set generate.cache.kind / "
                              f"serve.cache.kind = \"none\"")
        out, text_out, hidden, text = BLOCKS[base.__name__]
        metadata = NamedBlockMetadata(return_hidden_states_index=out, return_encoder_hidden_states_index=text_out,
                                      hidden_states_argument_name=hidden, encoder_hidden_states_argument_name=text)
        TransformerBlockRegistry.register(model_class=cls, metadata=metadata)
        metadata._cls = base  # argument positions come from the base forward (a Speed subclass takes *args)


def _taylorseer_config(transformer: torch.nn.Module, interval: int, warmup: int, order: int):
    """TaylorSeer on the transformer's own blocks: the last block's output extrapolated between full steps, the
    others skipped (they return zeros of their recorded shape, which the last block's prediction ignores)."""
    from diffusers.hooks import TaylorSeerCacheConfig

    name, blocks = block_list(transformer)
    last = len(blocks) - 1
    return TaylorSeerCacheConfig(
        cache_interval=interval, disable_cache_before_step=warmup, max_order=order,
        taylor_factors_dtype=torch.float32, cache_identifiers=[rf"{re.escape(name)}\.{last}"],
        skip_predict_identifiers=[rf"{re.escape(name)}\.{i}" for i in range(last)])


def apply_step_cache(transformer: torch.nn.Module, cfg, option: str) -> str | None:
    """Put the cache `cfg` (a config.step_cache.StepCacheConfig) on the transformer; returns its label, None when
    `cfg.kind` is none. Call after the speed switches (they swap the blocks' class) and before any CUDA graph."""
    if cfg.kind == "none":
        return None
    if getattr(transformer, ATTR, None):
        raise ConfigError(f"{option}: the transformer already has a step cache ({getattr(transformer, ATTR)})")
    from diffusers.hooks import FirstBlockCacheConfig, HookRegistry, apply_first_block_cache, apply_taylorseer_cache

    if cfg.kind == "first_block":
        register_blocks(transformer)
        apply_first_block_cache(transformer, FirstBlockCacheConfig(threshold=cfg.threshold))
    elif cfg.kind == "taylorseer":
        apply_taylorseer_cache(transformer, _taylorseer_config(transformer, cfg.interval, cfg.warmup, cfg.order))
    else:
        raise ConfigError(f"{option}.kind = {cfg.kind!r}: use none, first_block or taylorseer")
    HookRegistry.check_if_exists_or_initialize(transformer).invalidate_child_registries_cache()
    setattr(transformer, ATTR, cfg.label)
    return cfg.label


def has_step_cache(transformer: torch.nn.Module) -> bool:
    return bool(getattr(transformer, ATTR, None))


@contextmanager
def step_context(transformer: torch.nn.Module, name: str, step: int | None = None,
                 steps: int | None = None) -> Iterator[None]:
    """Within the block, the transformer's calls belong to the cache state `name` (one per guidance branch, as
    diffusers' `cache_context`); a no-op without a step cache."""
    if not has_step_cache(transformer):
        yield
        return
    from diffusers.hooks.hooks import CacheContext, _set_cache_context

    _set_cache_context(transformer, CacheContext(name, step_index=step, num_inference_steps=steps))
    try:
        yield
    finally:
        _set_cache_context(transformer, None)


def reset_step_cache(transformer: torch.nn.Module) -> None:
    """Forget every cached step (call before each new video or chunk: its first steps must run in full)."""
    if has_step_cache(transformer):
        from diffusers.hooks import HookRegistry

        HookRegistry.check_if_exists_or_initialize(transformer).reset_stateful_hooks()


def remove_step_cache(transformer: torch.nn.Module) -> None:
    """Take the step cache's hooks off the transformer (every block runs every step again)."""
    if not has_step_cache(transformer):
        return
    from diffusers.hooks import HookRegistry
    from diffusers.hooks.first_block_cache import _FBC_BLOCK_HOOK, _FBC_LEADER_BLOCK_HOOK
    from diffusers.hooks.taylorseer_cache import _TAYLORSEER_CACHE_HOOK

    registry = HookRegistry.check_if_exists_or_initialize(transformer)
    for name in (_FBC_LEADER_BLOCK_HOOK, _FBC_BLOCK_HOOK, _TAYLORSEER_CACHE_HOOK):
        registry.remove_hook(name, recurse=True)
    registry.invalidate_child_registries_cache()
    setattr(transformer, ATTR, None)
