"""Activation checkpointing: which repeated blocks recompute their activations in the backward pass.

(Selective checkpointing, which keeps the attention outputs, is models/speed.py's; the trainer picks between them
with models/memory.py's `uses_selective_checkpointing`.)
"""

from __future__ import annotations

import torch

from worldtune.errors import ConfigError
from worldtune.models.speed import repeated_blocks


def choose_checkpointing(setting: str, num_blocks: int, device: torch.device,
                         per_block_bytes: float | None = None, reserve_bytes: float = 0.0) -> list[int]:
    """Indices of the blocks to recompute in the backward pass.

    `auto` keeps activations of as many blocks as the GPU's free memory allows (recomputing costs
    about a third of a step), and checkpoints the rest; on a CPU it checkpoints nothing.
    """
    if setting == "off":
        return []
    if setting == "all":
        return list(range(num_blocks))
    kind, _, arg = setting.partition(":")
    if kind == "every" and arg.isdigit() and int(arg) > 0:
        return list(range(0, num_blocks, int(arg)))
    if kind == "blocks" and arg.isdigit():
        return list(range(min(int(arg), num_blocks)))
    if setting == "auto":
        if device.type != "cuda" or not per_block_bytes:
            return []
        free, _ = torch.cuda.mem_get_info(device)
        budget = 0.80 * (free - reserve_bytes)
        keep = int(min(num_blocks, max(0, budget // per_block_bytes)))
        return list(range(num_blocks - keep))
    raise ConfigError(f"train.grad_checkpointing={setting!r}: use off, all, selective, every:N, blocks:N or auto")


def apply_checkpointing(transformer: torch.nn.Module, blocks: list[int]) -> None:
    """Recompute the chosen blocks in backward; module names (and so state dicts) are unchanged."""
    from functools import partial

    from torch.utils.checkpoint import checkpoint

    def _ckpt(fwd, *args, **kwargs):
        if torch.is_grad_enabled():
            return checkpoint(fwd, *args, use_reentrant=False, **kwargs)
        return fwd(*args, **kwargs)

    all_blocks = repeated_blocks(transformer)
    for i in blocks:
        block = all_blocks[i]
        block.forward = partial(_ckpt, block.forward)
