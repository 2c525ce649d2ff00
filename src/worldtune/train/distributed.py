"""The processes of a training run: rank, world size and device from the launcher, and FSDP2 sharding.

Runs as one process or under torchrun / accelerate launch / SLURM (env rendezvous: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from worldtune.models.speed import repeated_blocks


class Dist:
    """Rank, world size and device from the launcher's environment (nothing set = one process)."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available()
        self.device = torch.device(f"cuda:{self.local_rank}") if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if cuda else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def mean(self, x: float) -> float:
        if self.world == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(t)
        return float(t.item()) / self.world

    def any(self, flag: bool) -> bool:
        if self.world == 1:
            return flag
        t = torch.tensor([int(flag)], device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        """End the process group before the interpreter exits: left to the exit's destructors, a gloo group's
        threads can abort a process that has finished its work (SIGABRT after the last line of a run)."""
        if self.world > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def shard_fsdp2(transformer: torch.nn.Module, param_dtype: torch.dtype | None, cpu_offload: bool):
    """FSDP2: shard each block, then the root; returns the (now DTensor) trainable parameters."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kw: dict[str, Any] = {}
    if param_dtype is not None:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if cpu_offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for block in repeated_blocks(transformer):
        fully_shard(block, **kw)
    fully_shard(transformer, **kw)
    return [p for p in transformer.parameters() if p.requires_grad]
