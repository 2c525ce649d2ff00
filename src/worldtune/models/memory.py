"""Training-step memory of a Cosmos DiT, and a planner that picks the cheapest settings that fit.

Why a model and not a try-and-see: a 14B out-of-memory costs minutes of loading per attempt on
a shared cluster; the arithmetic below answers in a second and shows its work.

Activations are counted tensor by tensor in models/activations.py (its names are importable from
here too).

State accounting (bytes per parameter):
- frozen base weights: 2 (bf16);
- trainable parameters (adapter, or every DiT parameter for full fine-tuning): fp32 master 4 +
  fp32 gradient 4 + AdamW m and v 8 = 16; full fine-tuning also keeps the bf16 working copy (2),
  so full = 2 + 4 + 4 + 8 = 18 bytes/param.
Sharding (FSDP/ZeRO): "none" replicates everything; "grad_op" (ZeRO-2, SHARD_GRAD_OP) divides
master, gradients and Adam states over the GPUs; "full" (ZeRO-3, FULL_SHARD) divides the weights
too and adds two gathered blocks in flight. CPU offload moves master, gradients and Adam states to
host memory (and, with full sharding, the weights: FSDP offload_params).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Literal

from worldtune.errors import ConfigError
from worldtune.models.activations import (BF16, FP32, ActivationEstimate, BlockDims, Mode,  # noqa: F401 (re-exported)
                                          block_bytes_per_text_token, block_bytes_per_token, dora_block_constant,
                                          estimate_activations)
from worldtune.models.flops import DEFAULT_TEXT_TOKENS

Sharding = Literal["none", "grad_op", "full"]

GIB = 2**30
CUDA_CONTEXT_GIB = 1.0  # CUDA context + cuBLAS/cuDNN workspaces outside PyTorch's allocator
FRAGMENTATION = 0.05  # share of the card the caching allocator cannot hand out


def uses_selective_checkpointing(setting: str, device_type: str, memory_auto: bool = False) -> bool:
    """Does `train.grad_checkpointing` mean selective checkpointing of every block on this device?

    One rule for the trainer and the planner, so `model info --plan` plans what training does: on
    CUDA, "auto" recomputes every block except its attention kernels (the fastest setting that
    fits a 2B or 14B LoRA step on one H200) unless `memory_auto` asks for whole blocks chosen by
    free memory.
    """
    return setting == "selective" or (setting == "auto" and device_type == "cuda" and not memory_auto)


# ------------------------------------------------------------------------------------- planner
@dataclass(frozen=True)
class PlanLine:
    item: str
    gib: float
    arithmetic: str


@dataclass(frozen=True)
class MemoryPlan:
    """One setting (sharding, checkpointing, offload) and its per-GPU memory, line by line."""

    mode: Mode
    gpus: int
    gpu_mem_gib: float
    sharding: Sharding
    checkpointed_blocks: int
    layers: int
    offload: bool
    selective: bool  # checkpointed blocks keep their attention outputs
    lines: tuple[PlanLine, ...]
    cpu_gib: float  # host memory per GPU taken by offloaded states
    fits: bool
    note: str = ""
    alternatives: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_gib(self) -> float:
        return sum(line.gib for line in self.lines)

    @property
    def usable_gib(self) -> float:
        return usable_gib(self.gpu_mem_gib)


def usable_gib(gpu_mem_gib: float) -> float:
    """What PyTorch can really use of a card: minus the CUDA context and allocator fragmentation."""
    return (gpu_mem_gib - CUDA_CONTEXT_GIB) * (1 - FRAGMENTATION)


def _gib(x: float) -> float:
    return x / GIB


def memory_lines(total_params: int, trainable_params: int, block_params: int, act: ActivationEstimate,
                 mode: Mode, gpus: int, sharding: Sharding, offload: bool) -> tuple[list[PlanLine], float]:
    """The per-GPU memory of one setting as (item, GiB, arithmetic) lines, and host memory per GPU."""
    shard_states = gpus if sharding in ("grad_op", "full") else 1
    shard_weights = gpus if sharding == "full" else 1
    weights = total_params * BF16  # bf16 working weights: frozen base + (full) the bf16 copy
    lines: list[PlanLine] = []
    cpu = 0.0
    if offload and sharding == "full":
        gathered = 2 * block_params * BF16
        lines.append(PlanLine("weights (bf16, offloaded; 2 gathered blocks)", _gib(gathered),
                              f"2 x {block_params / 1e6:.0f} M x 2 B"))
        cpu += _gib(weights / gpus)
    else:
        w = weights / shard_weights
        gathered = 2 * block_params * BF16 if sharding == "full" else 0
        label = "frozen weights (bf16)" if mode != "full" else "weights (bf16 working copy)"
        lines.append(PlanLine(label, _gib(w + gathered),
                              f"{total_params / 1e9:.3f} B x 2 B" + (f" / {shard_weights}" if shard_weights > 1 else "")
                              + (f" + 2 gathered blocks x {block_params / 1e6:.0f} M x 2 B" if gathered else "")))
    states = trainable_params * (FP32 + FP32 + 2 * FP32) / shard_states
    what = "adapter" if mode != "full" else "all"
    arith = f"{trainable_params / 1e6:,.1f} M x (4 master + 4 grad + 8 Adam) B" + (
        f" / {shard_states}" if shard_states > 1 else "")
    if offload:
        lines.append(PlanLine(f"{what} params fp32 + grads + AdamW (offloaded to CPU)", 0.0, arith))
        cpu += _gib(states)
    else:
        lines.append(PlanLine(f"{what} params fp32 + grads + AdamW", _gib(states), arith))
    stored = act.layers - act.checkpointed_blocks
    lines.append(PlanLine(f"activations: {stored} blocks stored", _gib(stored * act.per_block_full),
                          f"{stored} x {_gib(act.per_block_full):.2f} GiB"))
    if act.checkpointed_blocks:
        kept = "inputs + attention outputs" if act.selective else "inputs"
        lines.append(PlanLine(f"activations: {act.checkpointed_blocks} blocks checkpointed ({kept})",
                              _gib(act.checkpointed_blocks * act.per_block_checkpointed),
                              f"{act.checkpointed_blocks} x {_gib(act.per_block_checkpointed):.3f} GiB"))
        share = act.recompute / act.per_block_full
        lines.append(PlanLine("recompute of one block in backward", _gib(act.recompute),
                              f"{share:.2f} x {_gib(act.per_block_full):.2f} GiB"))
    lines.append(PlanLine("outside blocks (RoPE, final layer, text)", _gib(act.outside_blocks), ""))
    lines.append(PlanLine("backward workspace (calibrated)", _gib(act.workspace),
                          "tokens x hidden x a fitted bytes-per-unit"))
    return lines, cpu


# relative step-time cost of each knob, for choosing the cheapest setting that fits
_SHARD_COST = {"none": 0.0, "grad_op": 0.02, "full": 0.05}
_OFFLOAD_COST = 1.0
_FULL_RECOMPUTE_COST = 1 / 3  # recomputing every block adds one forward to fwd+bwd (= 3 forwards)


def plan(spec: Any, mode: Mode, frames: int, height: int, width: int, batch: int = 1, gpus: int = 1,
         gpu_mem_gb: float = 141.0, lora_rank: int = 32, per_token_timestep: bool = False,
         param_count: Any = None, allow_offload: bool = False, grad_checkpointing: str = "auto",
         memory_auto: bool = False, compiled: bool = True, text_tokens: int | None = None,
         action_steps: int = 0) -> MemoryPlan:
    """The cheapest (sharding, checkpointed blocks, offload) that fits on `gpus` x `gpu_mem_gb`.

    The defaults are the trainer's on CUDA: per-frame adaLN (`per_token_timestep=False`), compiled
    blocks, and `grad_checkpointing="auto"`, which `uses_selective_checkpointing` (the trainer's own
    rule) turns into selective checkpointing of every block; with `memory_auto`, or "all" / "off",
    whole blocks. Only "auto" with `memory_auto` searches the number of checkpointed blocks.
    Cheapest = least extra step time: sharding (communication, ~2-5%) before checkpointing
    (recompute, up to +33%) before CPU offload (PCIe-bound, ~2x). If nothing fits, the plan with
    the smallest footprint is returned with fits=False. CPU offload is only considered with
    `allow_offload` (it needs ~16 B/param of host RAM per GPU and roughly doubles step time); when
    a plan does not fit without it, the note says whether offload would. `text_tokens` is the caption's length
    when known (a forward-dynamics step's action caption), else the family's own assumption; `action_steps`, the
    action tokens per clip of an action run (forward or inverse dynamics), modelled where the family models its own
    layers (Cosmos 3). `gpu_mem_gb` is what the card reports
    (an H200 is sold as 141 GB; PyTorch sees ~140 GiB), treated as GiB.
    """
    from worldtune.models.params import count_transformer_params, largest_block_params

    if mode not in ("lora", "dora", "full"):
        raise ConfigError(f"mode must be lora, dora or full, got {mode!r}")
    if gpus < 1 or gpu_mem_gb <= 0 or batch < 1:
        raise ConfigError("gpus, batch and gpu memory must be positive")
    from worldtune.models.family import family_of

    cfg = spec.transformer
    family = family_of(spec) if hasattr(spec, "family") else None
    own = (family.memory_model(frames, height, width, batch, mode, lora_rank, 0, False, compiled, text_tokens,
                               action_steps) if family else None)
    if action_steps and own is None:
        raise ConfigError(f"{spec.name}: the memory planner models action runs for Cosmos 3 only")
    if own is not None:  # the family models its own layers (Cosmos 3)
        pc, block, layers, _ = own
    else:
        pc = param_count or count_transformer_params(cfg, spec.lora_targets, lora_rank)
        block = largest_block_params(cfg)
        layers = int(cfg["num_layers"])
    trainable = pc.total if mode == "full" else pc.adapter(dora=mode == "dora")
    dit_text_tokens = text_tokens or getattr(spec, "max_sequence_length", DEFAULT_TEXT_TOKENS)
    budget = usable_gib(gpu_mem_gb)
    shardings: tuple[Sharding, ...] = ("none", "grad_op", "full") if gpus > 1 else ("none",)
    selective = uses_selective_checkpointing(grad_checkpointing, "cuda", memory_auto)
    counts = {"auto": range(layers + 1), "selective": (layers,), "all": (layers,), "off": (0,)}
    if grad_checkpointing not in counts:
        raise ConfigError(f"grad_checkpointing={grad_checkpointing!r}: the planner models auto, selective, all or off")
    ckpt_counts = (layers,) if selective else counts[grad_checkpointing]

    candidates = []
    for offload, ckpt, sharding in itertools.product((False, True), ckpt_counts, shardings):
        act = (family.memory_model(frames, height, width, batch, mode, lora_rank, ckpt, selective, compiled,
                                   text_tokens, action_steps)[3]
               if own is not None else
               estimate_activations(cfg, frames, height, width, batch, mode, lora_rank, ckpt, dit_text_tokens,
                                    per_token_timestep, selective, compiled))
        lines, cpu = memory_lines(pc.total, trainable, block, act, mode, gpus, sharding, offload)
        cost = _SHARD_COST[sharding] + _FULL_RECOMPUTE_COST * ckpt / layers + (_OFFLOAD_COST if offload else 0)
        candidates.append((cost, sum(x.gib for x in lines), sharding, ckpt, offload, lines, cpu))
    allowed = [c for c in candidates if allow_offload or not c[4]]
    fitting = [c for c in allowed if c[1] <= budget]
    chosen = min(fitting, key=lambda c: (c[0], c[1])) if fitting else min(allowed, key=lambda c: c[1])
    cost, total, sharding, ckpt, offload, lines, cpu = chosen
    note = ""
    if not fitting:
        note = _why_not(mode, pc.total, gpus, budget, total)
        with_offload = [c for c in candidates if c[4] and c[1] <= budget]
        if with_offload:
            best = min(with_offload, key=lambda c: (c[0], c[1]))
            note += (f"; with CPU offload it would fit ({best[1]:.0f} GiB per GPU + {best[6]:.0f} GiB host RAM "
                     "per GPU, ~2x slower)")
    return MemoryPlan(mode=mode, gpus=gpus, gpu_mem_gib=gpu_mem_gb, sharding=sharding, checkpointed_blocks=ckpt,
                      layers=layers, offload=offload, selective=selective, lines=tuple(lines), cpu_gib=cpu, fits=bool(fitting),
                      note=note)


def _why_not(mode: Mode, total: int, gpus: int, budget: float, smallest: float) -> str:
    if mode == "full":
        need = _gib(total * (BF16 + 16)) / gpus
        return (f"full fine-tuning keeps {total / 1e9:.2f} B params x 18 B (bf16 weights + fp32 master, grads, "
                f"AdamW) = {need:.0f} GiB per GPU over {gpus} GPU(s) before activations; even the smallest "
                f"setting needs {smallest:.0f} GiB > {budget:.0f} GiB usable: use more GPUs with full sharding, "
                "or LoRA")
    return (f"the smallest setting needs {smallest:.0f} GiB > {budget:.0f} GiB usable: "
            "use fewer frames, a smaller resolution or more GPUs")
