"""Which process generates which inputs.

Generation is embarrassingly parallel: each process (torchrun / accelerate launch / SLURM task)
takes a disjoint slice of the inputs and writes its own rows; no collective communication is
needed. The split is a pure function of (names, rank, world size) so every process computes the
same partition without talking to the others, and it is balanced to within one input.
"""

from __future__ import annotations

import os
from typing import Sequence, TypeVar

T = TypeVar("T")


def shard(items: Sequence[T], rank: int, world_size: int, key=lambda x: x) -> list[T]:
    """The items process `rank` of `world_size` owns: sorted by `key`, then every world_size-th.

    Sorting first makes the result independent of the order the inputs were listed in (two
    processes listing a folder may see different orders); striding balances long and short
    runs of similar inputs across processes.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    return sorted(items, key=key)[rank::world_size]


def process_index() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from the launcher's environment (torchrun, accelerate, SLURM)."""
    def env(*names: str, default: int) -> int:
        for n in names:
            if os.environ.get(n, "").strip().isdigit():
                return int(os.environ[n])
        return default

    world = env("WORLD_SIZE", "SLURM_NTASKS", default=1)
    rank = env("RANK", "SLURM_PROCID", default=0) if world > 1 else 0
    local = env("LOCAL_RANK", "SLURM_LOCALID", default=0) if world > 1 else 0
    return rank, world, local
