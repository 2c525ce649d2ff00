"""Analytic FLOPs of one `CosmosTransformer3DModel` forward, counted the way diffusers runs it.

Why analytic: a 2B forward at 704x1280 cannot be traced on a CPU, yet every plan, MFU figure and
cost estimate needs its FLOP count. The count follows diffusers 0.42's code path matmul by matmul
and matches `torch.utils.flop_counter.FlopCounterMode` exactly on the tiny models
(tests/models/test_flops.py), so it can be trusted at real size.

Conventions: a matmul of (m x k) @ (k x n) is 2*m*k*n FLOPs; biases, norms, activations, RoPE and
softmax are not counted (FlopCounterMode does not count them either; they are <0.5% at real size).
Attention is 4*N*S*D per layer (QK^T and AV). A training step is 3x the forward (model-FLOPs
convention: backward = 2x forward; recomputation from checkpointing is not counted).

Two timestep layouts exist. With a 1-D timestep (one per sample) the adaLN-LoRA modulations run
once per sample. With a 5-D per-frame timestep [B, 1, T, 1, 1] (training with conditioning
frames, and the 2.5 pipeline) diffusers expands the embedding to every token *before* the
modulation matmuls, so they run per token: ~3% of a 2B forward at 432x768.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from worldtune.errors import ConfigError, ModelError

VAE_TEMPORAL = 4  # Wan2.1 VAE: 4x temporal compression (first frame kept)
VAE_SPATIAL = 8  # and 8x spatial
DEFAULT_TEXT_TOKENS = 512


@dataclass(frozen=True)
class LatentShape:
    """Latent grid of one clip and the DiT sequence length it becomes after patchifying."""

    frames: int
    height: int
    width: int
    tokens: int  # per sample


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one forward, split by where they are spent (so a reader can see what dominates)."""

    parts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def attention_share(self) -> float:
        """Fraction spent in the attention matmuls (QK^T, AV): every part named "*attention"."""
        attn = sum(v for k, v in self.parts.items() if k.endswith("attention"))
        return attn / self.total if self.total else 0.0


def _dims(cfg: Mapping[str, Any]) -> tuple[int, int, int]:
    """Hidden size, MLP width and adaLN-LoRA width of a transformer config."""
    hidden = int(cfg["num_attention_heads"]) * int(cfg["attention_head_dim"])
    mlp = int(hidden * float(cfg.get("mlp_ratio", 4.0)))  # diffusers' FeedForward: int(dim * mult)
    return hidden, mlp, int(cfg.get("adaln_lora_dim", 256))


def _check_supported(cfg: Mapping[str, Any]) -> None:
    if cfg.get("img_context_dim_in") or cfg.get("controlnet_block_every_n"):
        raise ModelError("image-context / controlnet (Transfer) transformers are not supported by the FLOP counter")
    if cfg.get("extra_pos_embed_type") not in (None, "learnable"):
        raise ModelError(f"unknown extra_pos_embed_type {cfg.get('extra_pos_embed_type')!r} in the transformer config")


def latent_shape(cfg: Mapping[str, Any], frames: int, height: int, width: int) -> LatentShape:
    """Latent frames (F-1)//4+1, latent H/8 x W/8, and tokens = T_lat * H_lat/p_h * W_lat/p_w."""
    p_t, p_h, p_w = (int(p) for p in cfg.get("patch_size", (1, 2, 2)))
    if frames < 1:
        raise ConfigError(f"frames must be >= 1, got {frames}")
    if height % (VAE_SPATIAL * p_h) or width % (VAE_SPATIAL * p_w) or height <= 0 or width <= 0:
        raise ConfigError(
            f"height x width {height}x{width} must be positive multiples of {VAE_SPATIAL * p_h}x{VAE_SPATIAL * p_w} "
            "(VAE stride x patch size): pick e.g. 432x768 or 704x1280"
        )
    t_lat = (frames - 1) // VAE_TEMPORAL + 1
    h_lat, w_lat = height // VAE_SPATIAL, width // VAE_SPATIAL
    if t_lat % p_t:
        raise ConfigError(f"{t_lat} latent frames is not a multiple of the temporal patch {p_t}")
    return LatentShape(t_lat, h_lat, w_lat, (t_lat // p_t) * (h_lat // p_h) * (w_lat // p_w))


def forward_flops(
    cfg: Mapping[str, Any],
    frames: int,
    height: int,
    width: int,
    batch: int = 1,
    text_tokens: int = DEFAULT_TEXT_TOKENS,
    per_token_timestep: bool = True,
) -> FlopCount:
    """FLOPs of one transformer forward on `batch` clips of frames x height x width pixels.

    `cfg` is a transformer config dict (a spec's `transformer`, or a loaded directory's
    config.json). `text_tokens` is the text sequence length (512 for both Cosmos pipelines).
    `per_token_timestep` selects the 5-D per-frame timestep (True) or a 1-D one per sample.
    """
    _check_supported(cfg)
    shape = latent_shape(cfg, frames, height, width)
    d, m, a = _dims(cfg)
    p_t, p_h, p_w = (int(p) for p in cfg.get("patch_size", (1, 2, 2)))
    layers = int(cfg["num_layers"])
    n = batch * shape.tokens  # all tokens of the batch
    s = batch * text_tokens  # all text tokens of the batch
    text_dim = int(cfg["text_embed_dim"])
    # patch embed input: latent channels (incl. the condition-mask channel) + the padding-mask channel
    patch_in = (int(cfg["in_channels"]) + (1 if cfg.get("concat_padding_mask", True) else 0)) * p_t * p_h * p_w
    # rows the modulation matmuls run on: every token (5-D timestep) or one row per sample (1-D)
    mod_rows = n if per_token_timestep else batch
    time_rows = batch * shape.frames if per_token_timestep else batch

    parts: dict[str, int] = {}
    parts["patch_embed"] = 2 * n * patch_in * d
    parts["time_embedding"] = 2 * time_rows * (d * d + d * 3 * d)  # linear_1 D->D, linear_2 D->3D
    if cfg.get("use_crossattn_projection"):
        parts["crossattn_proj"] = 2 * s * int(cfg["crossattn_proj_in_channels"]) * int(
            cfg.get("encoder_hidden_states_channels", text_dim))
    parts["adaln_modulation"] = layers * 3 * 2 * mod_rows * (d * a + a * 3 * d)  # norm1..3: D->a->3D
    parts["self_attn_proj"] = layers * 4 * 2 * n * d * d  # to_q, to_k, to_v, to_out.0
    parts["self_attention"] = layers * 4 * batch * shape.tokens**2 * d  # QK^T + AV
    parts["cross_attn_proj"] = layers * (2 * 2 * n * d * d + 2 * 2 * s * text_dim * d)  # q, out; k, v on text
    parts["cross_attention"] = layers * 4 * batch * shape.tokens * text_tokens * d
    parts["mlp"] = layers * 2 * 2 * n * d * m  # ff.net.0.proj D->M, ff.net.2 M->D
    parts["final_layer"] = 2 * mod_rows * (d * a + a * 2 * d) + 2 * n * d * (p_t * p_h * p_w * int(cfg["out_channels"]))
    return FlopCount(parts)


def train_step_flops(cfg: Mapping[str, Any], frames: int, height: int, width: int, batch: int = 1,
                     text_tokens: int = DEFAULT_TEXT_TOKENS, per_token_timestep: bool = True) -> int:
    """Model FLOPs of one training step: 3x the forward (backward = 2x forward)."""
    return 3 * forward_flops(cfg, frames, height, width, batch, text_tokens, per_token_timestep).total
