"""Activation memory of a Cosmos 3 LoRA training step, counted tensor by tensor.

Cosmos 3's decoder layer is not the Predict DiT block of models/memory.py: two towers over one packed
sequence, the reasoner over the text and the generator over the video patches. With LoRA on the
generator's attention projections (NVIDIA's recipe) the reasoner has nothing to differentiate, so
autograd keeps nothing of it except the keys and values the generator's attention reads. What one
layer keeps per generator token, as diffusers 0.42 runs it (bf16 weights, peft adapters in fp32):

- the two RMSNorms compute in fp32: each keeps its fp32 input (4 D) and 1/rms (4);
- each adapted Linear keeps an fp32 copy of its input (4 D for q, k, v; 4 H*hd for the output
  projection) and its lora_A output (4 r);
- the per-head q and k RMSNorms: fp32 inputs (4 H*hd, 4 KV*hd) and 1/rms (4 H, 4 KV);
- attention: the rotated queries and the output (2 H*hd each, bf16) and the log-sum-exp (4 H); the
  keys and values (2 KV*hd each, bf16) of every key, text tokens included;
- the MLP: relu2 keeps its ReLU output (2 I); SiLU-gated keeps gate, SiLU and up outputs (6 I).

Outside the layers: the final generator norm (4 D + 4) and the rotary tables (2 x 2 hd per token, bf16,
shared by every layer). tests/models/test_cosmos3_memory.py checks these counts byte for byte against
`saved_tensors_hooks` on the tiny spec. What autograd does not save but backward needs at its peak
(gradient buffers, attention workspace) is one calibrated term per token per hidden unit, and what
`torch.compile` saves of a layer (it recomputes the fp32 casts and pointwise work) one calibrated share
of the eager count; both were fitted to the H200 peaks of docs/benchmarks.md (docs/models.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from worldtune.errors import ConfigError
from worldtune.models.activations import BF16, FP32, ActivationEstimate

# Backward peak buffers per generator token per hidden unit (bytes), fitted to the eager Edge LoRA step at
# 93x480x832 on one H200 (29.83 GiB peak; docs/models.md).
BACKWARD_WORKSPACE_BYTES = 42.0
# What the compiled layers keep, as a share of the eager count, fitted to the compiled step of the same run
# (22.06 GiB peak).
COMPILED_SAVED_SHARE = 0.66
VAE_SPATIAL, VAE_TEMPORAL = 16, 4  # Wan2.2 VAE strides


@dataclass(frozen=True)
class Cosmos3Dims:
    hidden: int
    mlp: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    patch: int
    silu: bool

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "Cosmos3Dims":
        return cls(int(cfg["hidden_size"]), int(cfg["intermediate_size"]), int(cfg["num_attention_heads"]),
                   int(cfg["num_key_value_heads"]), int(cfg["head_dim"]), int(cfg["num_hidden_layers"]),
                   int(cfg["latent_patch_size"]), cfg.get("hidden_act", "silu") == "silu")


def layer_bytes_per_video_token(d: Cosmos3Dims, rank: int) -> int:
    """Bytes one decoder layer keeps per generator (video) token for a LoRA step (keys and values apart)."""
    q, kv = d.heads * d.head_dim, d.kv_heads * d.head_dim
    norms = 2 * (FP32 * d.hidden + FP32)  # input and post-attention RMSNorm: fp32 input, 1/rms
    adapters = 3 * FP32 * d.hidden + FP32 * q + 4 * FP32 * rank  # fp32 inputs of q, k, v, o; lora_A outputs
    qk_norms = FP32 * q + FP32 * d.heads + FP32 * kv + FP32 * d.kv_heads
    attention = 2 * BF16 * q + FP32 * d.heads  # rotated q, output, log-sum-exp
    mlp = (6 if d.silu else 2) * d.mlp
    return norms + adapters + qk_norms + attention + mlp


def layer_bytes_per_reasoner_token(d: Cosmos3Dims) -> int:
    """Bytes one layer keeps per text token of an action run (forward or inverse dynamics, policy). With the domain's
    action rows training, the reasoner's text stream is differentiated too (no adapters of its own): its two RMSNorms
    (fp32 input, 1/rms), its key RMSNorm (fp32 input, 1/rms), its own attention over the text (rotated queries,
    output, log-sum-exp, and a bf16 copy of its keys and values) and its MLP activation."""
    q, kv = d.heads * d.head_dim, d.kv_heads * d.head_dim
    norms = 2 * (FP32 * d.hidden + FP32)
    k_norm = FP32 * kv + FP32 * d.kv_heads
    attention = 2 * BF16 * q + FP32 * d.heads + 2 * BF16 * kv
    mlp = (6 if d.silu else 2) * d.mlp
    return norms + k_norm + attention + mlp


def layer_bytes_per_key(d: Cosmos3Dims) -> int:
    """Bytes one layer keeps per attention key (every text and video token): its key and value, bf16."""
    return 2 * BF16 * d.kv_heads * d.head_dim


def tokens(cfg: Mapping[str, Any], frames: int, height: int, width: int) -> int:
    """Video tokens of a clip: latent frames x patches (the model pads an odd latent grid)."""
    p = int(cfg["latent_patch_size"])
    return (((frames - 1) // VAE_TEMPORAL + 1) * math.ceil(height // VAE_SPATIAL / p)
            * math.ceil(width // VAE_SPATIAL / p))


def estimate_activations(cfg: Mapping[str, Any], frames: int, height: int, width: int, batch: int = 1,
                         rank: int = 16, checkpointed_blocks: int = 0, text_tokens: int = 512,
                         selective: bool = False, compiled: bool = True, action_steps: int = 0) -> ActivationEstimate:
    """Activation memory of one LoRA step of `batch` clips: each keeps its activations until the loss's backward,
    whether the clips share one transformer call (models/cosmos3_batch.py) or run one after another.

    `action_steps` > 0: an action run (forward or inverse dynamics, policy) with that many action tokens per clip.
    They join the generator's tokens, and the reasoner keeps its text activations (`layer_bytes_per_reasoner_token`).

    Checkpointed layers keep their inputs (the generator and reasoner streams, bf16), and with `selective`
    both attention outputs (bf16 output and fp32 log-sum-exp per query); the layer rebuilt in backward holds
    a whole layer again. Compiled layers keep `COMPILED_SAVED_SHARE` of the eager count."""
    d = Cosmos3Dims.from_config(cfg)
    if not 0 <= checkpointed_blocks <= d.layers:
        raise ConfigError(f"checkpointed_blocks must be in 0..{d.layers}, got {checkpointed_blocks}")
    n = batch * (tokens(cfg, frames, height, width) + action_steps)
    s = batch * text_tokens
    full = n * layer_bytes_per_video_token(d, rank) + (n + s) * layer_bytes_per_key(d)
    if action_steps:
        full += s * layer_bytes_per_reasoner_token(d)
    if compiled:
        full = int(COMPILED_SAVED_SHARE * full)
    kept = (n + s) * BF16 * d.hidden
    if selective:
        kept += (n + s) * (BF16 * d.heads * d.head_dim + FP32 * d.heads)
    outside = n * (FP32 * d.hidden + FP32) + (n + s) * 2 * BF16 * d.head_dim
    return ActivationEstimate(
        per_block_full=full, per_block_checkpointed=kept, outside_blocks=outside,
        workspace=int(n * d.hidden * BACKWARD_WORKSPACE_BYTES), checkpointed_blocks=checkpointed_blocks,
        layers=d.layers, recompute=full if checkpointed_blocks else 0, selective=selective)
