"""Activation memory of a Cosmos DiT training step, counted tensor by tensor.

Activations are counted from what autograd saves in diffusers 0.42's `CosmosTransformerBlock` (bf16 compute,
peft adapters in fp32, so each adapted Linear keeps an fp32 copy of its input). The per-block byte counts below
match `saved_tensors_hooks` measurements exactly on CPU (tests/models/test_info.py). What autograd does not save
but the backward pass needs at its peak (gradient buffers, attention workspace) is one calibrated term,
`BACKWARD_WORKSPACE_BYTES` per token per hidden unit, fitted to H200 measurements (docs/models.md gives the fit
and its error).

The memory planner (models/memory.py) and the families that model their own layers (models/cosmos3_memory.py)
build on these counts; this module asks no family, so both can import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from worldtune.errors import ConfigError
from worldtune.models.flops import DEFAULT_TEXT_TOKENS, latent_shape

Mode = Literal["lora", "dora", "full"]

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
