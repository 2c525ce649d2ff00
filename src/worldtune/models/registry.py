"""Model specs by name: what a Cosmos model is made of and how it is used.

A spec is the single source of truth for a model family member: the diffusers pipeline class,
the configs of its components (so it can be built randomly initialised at any size), its text
encoder kind, default clip shape and fps, and the LoRA target modules. Real sizes come from
diffusers' conversion script (shared/DESIGN.md §3); tiny sizes use the same classes with a few
layers so that tests and the demo run the real code paths on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from worldtune.errors import ModelError

TextEncoderKind = Literal["qwen2.5-vl", "t5"]

LORA_TARGETS: tuple[str, ...] = ("to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2")

# Wan2.1 VAE: diffusers' AutoencoderKLWan defaults are the real Wan2.1 config.
_WAN21_VAE: dict[str, Any] = {}
_TINY_VAE: dict[str, Any] = {"base_dim": 8, "dim_mult": [1, 1, 1, 1], "num_res_blocks": 1}

_REAL_2B: dict[str, Any] = {
    "in_channels": 17, "out_channels": 16, "num_attention_heads": 16, "attention_head_dim": 128,
    "num_layers": 28, "mlp_ratio": 4.0, "text_embed_dim": 1024, "adaln_lora_dim": 256,
    "max_size": (128, 240, 240), "patch_size": (1, 2, 2), "rope_scale": (1.0, 3.0, 3.0),
    "concat_padding_mask": True, "extra_pos_embed_type": None,
    "use_crossattn_projection": True, "crossattn_proj_in_channels": 100352,
    "encoder_hidden_states_channels": 1024,
}
_REAL_14B_P2: dict[str, Any] = {
    "in_channels": 17, "out_channels": 16, "num_attention_heads": 40, "attention_head_dim": 128,
    "num_layers": 36, "mlp_ratio": 4.0, "text_embed_dim": 1024, "adaln_lora_dim": 256,
    "max_size": (128, 240, 240), "patch_size": (1, 2, 2), "rope_scale": (20 / 24, 2.0, 2.0),
    "concat_padding_mask": True, "extra_pos_embed_type": None,
}
_TINY_25: dict[str, Any] = {
    "in_channels": 17, "out_channels": 16, "num_attention_heads": 2, "attention_head_dim": 16,
    "num_layers": 2, "mlp_ratio": 2.0, "text_embed_dim": 16, "adaln_lora_dim": 4,
    "max_size": (16, 64, 64), "patch_size": (1, 2, 2), "rope_scale": (1.0, 3.0, 3.0),
    "concat_padding_mask": True, "extra_pos_embed_type": None,
    "use_crossattn_projection": True, "crossattn_proj_in_channels": 32,
    "encoder_hidden_states_channels": 16,
}
_TINY_P2: dict[str, Any] = {
    **{k: v for k, v in _TINY_25.items() if not k.startswith(("use_crossattn", "crossattn", "encoder_hidden"))},
    "rope_scale": (20 / 24, 2.0, 2.0),
}

# Qwen2.5-VL-7B (Cosmos-Reason1-7B) text model; 28 layers x 3584 = the 100352-dim embedding.
_REAL_QWEN: dict[str, Any] = {
    "text_config": {
        "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 128000,
        "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "tie_word_embeddings": False,
    },
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                      "out_hidden_size": 3584, "fullatt_block_indexes": [7, 15, 23, 31]},
}
_TINY_QWEN: dict[str, Any] = {
    "text_config": {
        "vocab_size": 320, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 1024,
        "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}, "tie_word_embeddings": False,
        "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 0,
    },
    "vision_config": {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
                      "out_hidden_size": 16, "fullatt_block_indexes": [0]},
}
_REAL_T5: dict[str, Any] = {
    "vocab_size": 32128, "d_model": 1024, "d_kv": 128, "d_ff": 65536, "num_layers": 24, "num_heads": 128,
    "feed_forward_proj": "relu", "is_encoder_decoder": False,
}
_TINY_T5: dict[str, Any] = {
    "vocab_size": 320, "d_model": 16, "d_kv": 8, "d_ff": 32, "num_layers": 2, "num_heads": 2,
    "feed_forward_proj": "relu", "is_encoder_decoder": False,
}

# Scheduler configs as written by diffusers' conversion script.
_UNIPC_FLOW: dict[str, Any] = {
    "use_karras_sigmas": True, "use_flow_sigmas": True, "prediction_type": "flow_prediction",
    "sigma_max": 200.0, "sigma_min": 0.01,
}
_FLOW_EULER: dict[str, Any] = {"use_karras_sigmas": True}


@dataclass(frozen=True)
class ModelSpec:
    """Everything worldtune needs to know about one model, independent of its weights."""

    name: str
    family: str  # a models.family.ModelFamily name: "predict2.5", "predict2", "cosmos3"
    pipeline_class: str
    text_encoder_kind: TextEncoderKind
    transformer: dict[str, Any]
    vae: dict[str, Any]
    text_encoder: dict[str, Any]
    scheduler_class: str
    scheduler: dict[str, Any]
    height: int
    width: int
    num_frames: int
    fps: int
    max_sequence_length: int = 512
    lora_targets: tuple[str, ...] = LORA_TARGETS
    tiny: bool = False
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text_embed_dim(self) -> int:
        """Width of the embedding the text encoder hands to the transformer (before any projection)."""
        t = self.transformer
        return t["crossattn_proj_in_channels"] if t.get("use_crossattn_projection") else t["text_embed_dim"]


SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            name="cosmos-predict2.5-2b", family="predict2.5", pipeline_class="Cosmos2_5_PredictBasePipeline",
            text_encoder_kind="qwen2.5-vl", transformer=_REAL_2B, vae=_WAN21_VAE, text_encoder=_REAL_QWEN,
            scheduler_class="UniPCMultistepScheduler", scheduler=_UNIPC_FLOW,
            height=704, width=1280, num_frames=93, fps=16,
            description="NVIDIA Cosmos-Predict2.5-2B (Qwen2.5-VL text encoder, Wan2.1 VAE)",
        ),
        ModelSpec(
            name="cosmos-predict2-14b", family="predict2", pipeline_class="Cosmos2VideoToWorldPipeline",
            text_encoder_kind="t5", transformer=_REAL_14B_P2, vae=_WAN21_VAE, text_encoder=_REAL_T5,
            scheduler_class="FlowMatchEulerDiscreteScheduler", scheduler=_FLOW_EULER,
            height=480, width=832, num_frames=93, fps=16,
            description="NVIDIA Cosmos-Predict2-14B Video2World (T5-11B text encoder, Wan2.1 VAE)",
        ),
        ModelSpec(
            name="tiny-predict2.5", family="predict2.5", pipeline_class="Cosmos2_5_PredictBasePipeline",
            text_encoder_kind="qwen2.5-vl", transformer=_TINY_25, vae=_TINY_VAE, text_encoder=_TINY_QWEN,
            scheduler_class="UniPCMultistepScheduler", scheduler=_UNIPC_FLOW,
            # 256: the byte-level tiny tokenizer spends ~90 tokens on the pipeline's system prompt
            height=64, width=112, num_frames=17, fps=16, max_sequence_length=256, tiny=True,
            description="Tiny random Cosmos-Predict2.5 of the same classes, for tests and the demo",
        ),
        ModelSpec(
            name="tiny-predict2", family="predict2", pipeline_class="Cosmos2VideoToWorldPipeline",
            text_encoder_kind="t5", transformer=_TINY_P2, vae=_TINY_VAE, text_encoder=_TINY_T5,
            scheduler_class="FlowMatchEulerDiscreteScheduler", scheduler=_FLOW_EULER,
            height=64, width=112, num_frames=17, fps=16, max_sequence_length=128, tiny=True,
            description="Tiny random Cosmos-Predict2 of the same classes, for tests and the demo",
        ),
    ]
}

def get_spec(name: str) -> ModelSpec:
    """Look a spec up by name, with the known names in the error."""
    try:
        return SPECS[name]
    except KeyError:
        raise ModelError(
            f"unknown model '{name}': use one of {', '.join(SPECS)} or a path to a diffusers model directory"
        ) from None
