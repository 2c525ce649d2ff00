"""Training-step memory of a Cosmos DiT, and a planner that picks the cheapest settings that fit.

Why a model and not a try-and-see: a 14B out-of-memory costs minutes of loading per attempt on
a shared cluster; the arithmetic below answers in a second and shows its work.

Activations are counted tensor by tensor from what autograd saves in diffusers 0.42's
`CosmosTransformerBlock` (bf16 compute, peft adapters in fp32, so each adapted Linear keeps an
fp32 copy of its input). The per-block byte counts below match `saved_tensors_hooks`
measurements exactly on CPU (tests/models/test_info.py). What autograd does not save but the
backward pass needs at its peak (gradient buffers, attention workspace) is one calibrated term,
`BACKWARD_WORKSPACE_BYTES` per token per hidden unit, fitted to H200 measurements
(docs/models.md gives the fit and its error).

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
from typing import Any, Literal, Mapping

from worldtune.errors import ConfigError
from worldtune.models.flops import DEFAULT_TEXT_TOKENS, latent_shape

Mode = Literal["lora", "dora", "full"]
Sharding = Literal["none", "grad_op", "full"]

GIB = 2**30
BF16, FP32 = 2, 4
LN_STATS = 8  # LayerNorm mean + rstd, fp32, per token
# Gradient buffers and attention workspace live at the backward peak, per token per hidden unit
# (bytes); fitted to H200 peaks (docs/models.md). Not saved by autograd, so not counted above.
BACKWARD_WORKSPACE_BYTES = 36.0
# Compiled selective checkpointing rebuilds a block inside one fused backward graph that frees what it
# has used: its peak is this share of the block's eager saved bytes. Fitted to the H200 peaks of the
# 2B at 704x1280 (0.351) and the 14B at 432x768 (0.376); the 2B at 432x768 is the held-out check
# (docs/models.md).
SELECTIVE_RECOMPUTE_SHARE = 0.36
CUDA_CONTEXT_GIB = 1.0  # CUDA context + cuBLAS/cuDNN workspaces outside PyTorch's allocator
FRAGMENTATION = 0.05  # share of the card the caching allocator cannot hand out


@dataclass(frozen=True)
class BlockDims:
    """The sizes that activation memory depends on."""

    hidden: int
    mlp: int
    heads: int
    head_dim: int
    text_dim: int
    adaln: int
    layers: int

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "BlockDims":
        heads, hd = int(cfg["num_attention_heads"]), int(cfg["attention_head_dim"])
        d = heads * hd
        return cls(d, int(d * float(cfg.get("mlp_ratio", 4.0))), heads, hd, int(cfg["text_embed_dim"]),
                   int(cfg.get("adaln_lora_dim", 256)), int(cfg["num_layers"]))


def block_bytes_per_token(dims: BlockDims, mode: Mode, rank: int = 32, per_token_timestep: bool = True) -> int:
    """Bytes autograd saves per video token in one block (bf16 compute, fp32 adapters).

    Shared by every mode: LayerNorm inputs, the q/k RMSNorms (computed in fp32), RoPE cos/sin
    (fp32), attention q/k/v/out and log-sum-exp, the GELU input. A per-token timestep adds the
    materialised (1 + scale) and the [N, 3D] modulation tensor each gate is a view of.
    """
    d, m, h, hd = dims.hidden, dims.mlp, dims.heads, dims.head_dim
    t = 1 if per_token_timestep else 0
    shared = (3 * (BF16 * d + LN_STATS)  # norm1..3 inputs
              + 3 * (FP32 * d + BF16 * d + FP32 * h)  # RMSNorm of self q, k and cross q
              + 2 * FP32 * hd  # RoPE cos, sin
              + 4 * BF16 * d + FP32 * h  # self-attention q, k, v, out, lse
              + 2 * BF16 * d + FP32 * h  # cross-attention q, out, lse
              + BF16 * m)  # GELU input
    if mode == "full":
        weights_inputs = 3 * BF16 * d + BF16 * m  # inputs of to_q/k/v (shared), cross to_q, ff.0, ff.2
        scale_and_gates = 3 * BF16 * d + 3 * BF16 * d + 3 * BF16 * d  # normed x, q/k norm outputs, gated outputs
        per_token_mod = t * (BF16 * d + 3 * BF16 * d + 3 * BF16 * dims.adaln + 3 * BF16 * d + 3 * 3 * BF16 * d)
        return shared + weights_inputs + scale_and_gates + per_token_mod
    adapters = FP32 * (7 * d + m) + 8 * FP32 * rank  # fp32 copies of adapted inputs; lora_A outputs
    per_token_mod = t * (3 * BF16 * d + 3 * 3 * BF16 * d)  # (1 + scale); [N, 3D] modulation per norm
    total = shared + adapters + per_token_mod
    if mode == "dora":  # measured: DoRA's magnitude path keeps ~38 D + 6 M more bytes per token
        total += 38 * d + 6 * m
    return total


def block_bytes_per_text_token(dims: BlockDims, mode: Mode, rank: int = 32) -> int:
    """Bytes saved per text token per block: the cross-attention keys/values side."""
    d, h = dims.hidden, dims.heads
    kv = (FP32 * d + BF16 * d + FP32 * h) + 2 * BF16 * d  # RMSNorm of k (fp32), k and v for attention
    if mode == "full":
        return kv + BF16 * dims.text_dim + BF16 * d  # + the to_k/v input and the k-norm weight's input
    return kv + 2 * FP32 * dims.text_dim + 2 * FP32 * rank


def dora_block_constant(dims: BlockDims, rank: int) -> int:
    """DoRA's weight-norm path saves an identity of size in x in (fp32) per adapted Linear."""
    ins = [dims.hidden] * 7 + [dims.text_dim] * 2 + [dims.mlp]
    return sum(FP32 * (i * i + i * rank) for i in ins)


def uses_selective_checkpointing(setting: str, device_type: str, memory_auto: bool = False) -> bool:
    """Does `train.grad_checkpointing` mean selective checkpointing of every block on this device?

    One rule for the trainer and the planner, so `model info --plan` plans what training does: on
    CUDA, "auto" recomputes every block except its attention kernels (the fastest setting that
    fits a 2B or 14B LoRA step on one H200) unless `memory_auto` asks for whole blocks chosen by
    free memory.
    """
    return setting == "selective" or (setting == "auto" and device_type == "cuda" and not memory_auto)


@dataclass(frozen=True)
class ActivationEstimate:
    """Activation bytes of one training step for a checkpointing choice."""

    per_block_full: int  # one block, nothing recomputed
    per_block_checkpointed: int  # one checkpointed block: its input (+ attention outputs if selective)
    outside_blocks: int  # RoPE tables, final layer, text context
    workspace: int  # backward peak buffers
    checkpointed_blocks: int
    layers: int
    recompute: int  # peak of the one checkpointed block rebuilt during backward (0 if none)
    selective: bool  # checkpointed blocks keep their attention outputs

    @property
    def total(self) -> int:
        stored = ((self.layers - self.checkpointed_blocks) * self.per_block_full
                  + self.checkpointed_blocks * self.per_block_checkpointed)
        return stored + self.recompute + self.outside_blocks + self.workspace


def estimate_activations(cfg: Mapping[str, Any], frames: int, height: int, width: int, batch: int = 1,
                         mode: Mode = "lora", rank: int = 32, checkpointed_blocks: int = 0,
                         text_tokens: int = DEFAULT_TEXT_TOKENS, per_token_timestep: bool = True,
                         selective: bool = False, compiled: bool = True) -> ActivationEstimate:
    """Activation memory of one step on `batch` clips with `checkpointed_blocks` blocks checkpointed.

    `selective`: the checkpointed blocks keep their self- and cross-attention outputs (an [N, D]
    bf16 tensor and the fp32 log-sum-exp each) and recompute the rest. Its backward peak is the
    calibrated `SELECTIVE_RECOMPUTE_SHARE` of a block when the blocks are compiled; eager, the
    whole block minus the kept outputs (not measured: an upper bound).
    """
    dims = BlockDims.from_config(cfg)
    if not 0 <= checkpointed_blocks <= dims.layers:
        raise ConfigError(f"checkpointed_blocks must be in 0..{dims.layers}, got {checkpointed_blocks}")
    n = batch * latent_shape(cfg, frames, height, width).tokens
    s = batch * text_tokens
    per_block = (n * block_bytes_per_token(dims, mode, rank, per_token_timestep)
                 + s * block_bytes_per_text_token(dims, mode, rank))
    if mode == "dora":
        per_block += dora_block_constant(dims, rank)
    t = 1 if per_token_timestep else 0
    final = n * (BF16 * dims.hidden * (1 + t) + LN_STATS) if mode != "full" else n * BF16 * dims.hidden * (3 + 2 * t)
    rope = n * 2 * FP32 * dims.head_dim
    text = s * BF16 * dims.text_dim
    if mode == "full" and cfg.get("use_crossattn_projection"):
        text += s * BF16 * int(cfg["crossattn_proj_in_channels"])  # input kept for the projection's grad
    kept = 2 * n * (BF16 * dims.hidden + FP32 * dims.heads) if selective else 0
    recompute = 0
    if checkpointed_blocks:
        recompute = (int(SELECTIVE_RECOMPUTE_SHARE * per_block) if selective and compiled
                     else per_block - kept)
    return ActivationEstimate(
        per_block_full=per_block, per_block_checkpointed=n * BF16 * dims.hidden + kept,
        outside_blocks=final + rope + text, workspace=int(n * dims.hidden * BACKWARD_WORKSPACE_BYTES),
        checkpointed_blocks=checkpointed_blocks, layers=dims.layers, recompute=recompute, selective=selective)


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
         memory_auto: bool = False, compiled: bool = True) -> MemoryPlan:
    """The cheapest (sharding, checkpointed blocks, offload) that fits on `gpus` x `gpu_mem_gb`.

    The defaults are the trainer's on CUDA: per-frame adaLN (`per_token_timestep=False`), compiled
    blocks, and `grad_checkpointing="auto"`, which `uses_selective_checkpointing` (the trainer's own
    rule) turns into selective checkpointing of every block; with `memory_auto`, or "all" / "off",
    whole blocks. Only "auto" with `memory_auto` searches the number of checkpointed blocks.
    Cheapest = least extra step time: sharding (communication, ~2-5%) before checkpointing
    (recompute, up to +33%) before CPU offload (PCIe-bound, ~2x). If nothing fits, the plan with
    the smallest footprint is returned with fits=False. CPU offload is only considered with
    `allow_offload` (it needs ~16 B/param of host RAM per GPU and roughly doubles step time); when
    a plan does not fit without it, the note says whether offload would. `gpu_mem_gb` is what the card reports
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
    own = family.memory_model(frames, height, width, batch, mode, lora_rank, 0, False, compiled) if family else None
    if own is not None:  # the family models its own layers (Cosmos 3)
        pc, block, layers, _ = own
    else:
        pc = param_count or count_transformer_params(cfg, spec.lora_targets, lora_rank)
        block = largest_block_params(cfg)
        layers = int(cfg["num_layers"])
    trainable = pc.total if mode == "full" else pc.adapter(dora=mode == "dora")
    text_tokens = getattr(spec, "max_sequence_length", DEFAULT_TEXT_TOKENS)
    budget = usable_gib(gpu_mem_gb)
    shardings: tuple[Sharding, ...] = ("none", "grad_op", "full") if gpus > 1 else ("none",)
    selective = uses_selective_checkpointing(grad_checkpointing, "cuda", memory_auto)
    counts = {"auto": range(layers + 1), "selective": (layers,), "all": (layers,), "off": (0,)}
    if grad_checkpointing not in counts:
        raise ConfigError(f"grad_checkpointing={grad_checkpointing!r}: the planner models auto, selective, all or off")
    ckpt_counts = (layers,) if selective else counts[grad_checkpointing]

    candidates = []
    for offload, ckpt, sharding in itertools.product((False, True), ckpt_counts, shardings):
        act = (family.memory_model(frames, height, width, batch, mode, lora_rank, ckpt, selective, compiled)[3]
               if own is not None else
               estimate_activations(cfg, frames, height, width, batch, mode, lora_rank, ckpt, text_tokens,
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
