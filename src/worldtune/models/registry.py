"""Model specs by name: what a Cosmos model is made of and how it is used.

A spec is the single source of truth for a model family member: the diffusers pipeline class,
the configs of its components (so it can be built randomly initialised at any size), its text
encoder kind, default clip shape and fps, and the LoRA target modules. Real sizes come from
diffusers' conversion script (scripts/convert_cosmos_to_diffusers.py); tiny sizes use the same classes with a few
layers so that tests and the demo run the real code paths on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from worldtune.errors import ModelError

TextEncoderKind = Literal["qwen2.5-vl", "t5", "tokens"]  # "tokens": the transformer embeds text ids itself

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

# Seed models (trained from scratch by `worldtune seed`, weights shipped in worldtune/seeds/): the real classes at a
# size a CPU generates with in seconds. Wan2.1 VAE with the real 8x spatial / 4x temporal compression and 16
# channels, 12 base channels, one residual block a stage; a 6-layer, 192-wide Cosmos-Predict2.5 transformer whose
# text enters through the learned crossattn projection (from the frozen tiny Qwen2.5-VL, as the real 2.5).
_SEED_VAE: dict[str, Any] = {"base_dim": 12, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 1}
_SEED_25: dict[str, Any] = {
    **_TINY_25, "num_attention_heads": 6, "attention_head_dim": 32, "num_layers": 6, "mlp_ratio": 4.0,
    "text_embed_dim": 192, "adaln_lora_dim": 32, "encoder_hidden_states_channels": 192,
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

# ---- Cosmos 3 (mixture of transformers; diffusers' Cosmos3OmniTransformer) ----
# Sources, by name: NVIDIA cosmos-framework (release 2026-08-21) inference/configs/model/Cosmos3-Edge.yaml
# and Cosmos3-Nano.yaml (the released checkpoints' model configs), the reasoner tower JSONs they point to
# (model/generator/reasoner/nemotron_3_dense_vl/configs/Nemotron-2B-Dense-VL.json,
# model/generator/reasoner/qwen3_vl/configs/Qwen3-VL-8B-Instruct.json), and diffusers 0.42.1's
# Cosmos3OmniTransformer defaults (which are the Nano values) and Cosmos 3 pipeline docs.
_COSMOS3_SHARED: dict[str, Any] = {
    "latent_channel": 48,  # yaml state_ch: 48 (Wan2.2 VAE)
    "latent_patch_size": 2, "patch_latent_dim": 192,  # yaml diffusion_expert_config.patch_spatial: 2; 2*2*48
    "base_fps": 24, "enable_fps_modulation": True,  # yaml diffusion_expert_config
    "unified_3d_mrope_reset_spatial_ids": True, "unified_3d_mrope_temporal_modality_margin": 15000,  # same block
    "timestep_scale": 0.001,  # 1/num_train_timesteps (1000) x timestep_range (1.0), as build_net computes it
    "action_gen": True, "action_dim": 64, "num_embodiment_domains": 32,  # yaml action_gen, max_action_dim, domains
    "sound_gen": False,  # yaml sound_gen: false
    "attention_bias": False,  # tower JSONs
}
_COSMOS3_EDGE: dict[str, Any] = {
    **_COSMOS3_SHARED,
    # Nemotron-2B-Dense-VL.json (one tower; the generator tower repeats its layers)
    "hidden_size": 2048, "intermediate_size": 9216, "num_hidden_layers": 28, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072, "hidden_act": "relu2",
    "rms_norm_eps": 1e-5, "rope_theta": 1e8, "rope_axes_dim": [24, 20, 20],  # layer_norm_epsilon, rope_theta, mrope_section
    "qk_norm_for_text": False, "use_und_k_norm_for_gen": True,  # Cosmos3-Edge.yaml create_vlm_config
}
_COSMOS3_NANO: dict[str, Any] = {
    **_COSMOS3_SHARED,
    # Qwen3-VL-8B-Instruct.json text_config (= diffusers' class defaults)
    "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "rope_theta": 5e6, "rope_axes_dim": [24, 20, 20],
    "qk_norm_for_text": True, "use_und_k_norm_for_gen": False,  # Cosmos3-Nano.yaml create_vlm_config
}
# Same classes, Edge's structure (relu2 MLP, und-K norm for the generator), a few thousand parameters;
# the vocabulary covers the tiny byte-level tokenizer (262 ids).
_TINY_COSMOS3: dict[str, Any] = {
    **_COSMOS3_EDGE, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 320, "rope_axes_dim": [4, 2, 2], "action_dim": 16,
}  # all 32 embodiment-domain slots, as the real models: existing domains (droid_lerobot = 8) and free slots
# Seed Cosmos 3 (trained from scratch by `worldtune seed`): the Edge structure (both towers, relu2 MLP, the action
# heads of 32 embodiment-domain slots) at 6 layers x 192 wide; the tiny byte-level tokenizer's vocabulary.
_SEED_COSMOS3: dict[str, Any] = {
    **_COSMOS3_EDGE, "hidden_size": 192, "intermediate_size": 768, "num_hidden_layers": 6, "num_attention_heads": 6,
    "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 320, "rope_axes_dim": [8, 4, 4], "action_dim": 16,
}
# Wan2.2 VAE (48 channels, 16x spatial / 4x temporal), as diffusers' convert_wan_to_diffusers.py writes it;
# its latents_mean / latents_std (48 values each) come with the checkpoint and are only needed to decode
# real latents, so the real-size random build uses neutral statistics.
_WAN22_VAE: dict[str, Any] = {
    "base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "is_residual": True, "in_channels": 12, "out_channels": 12,
    "patch_size": 2, "scale_factor_spatial": 16, "scale_factor_temporal": 4,
    "latents_mean": [0.0] * 48, "latents_std": [1.0] * 48,
}
_TINY_WAN22_VAE: dict[str, Any] = {**_WAN22_VAE, "base_dim": 8, "decoder_base_dim": 8, "dim_mult": [1, 1, 1, 1],
                                   "num_res_blocks": 1}
_SEED_WAN22_VAE: dict[str, Any] = {**_WAN22_VAE, "base_dim": 16, "decoder_base_dim": 24, "dim_mult": [1, 2, 4, 4],
                                   "num_res_blocks": 1}
# Flow-matching UniPC with the shift diffusers' Cosmos 3 docs use for video (flow_shift 10, no Karras sigmas).
_UNIPC_COSMOS3: dict[str, Any] = {"use_flow_sigmas": True, "prediction_type": "flow_prediction", "flow_shift": 10.0,
                                  "use_karras_sigmas": False}
# NVIDIA's LoRA recipes (Cosmos3-*.yaml lora_target_modules q/k/v/o_proj_moe_gen): the generator tower's four
# attention projections; diffusers names them add_q_proj, add_k_proj, add_v_proj, to_add_out.
COSMOS3_LORA_TARGETS: tuple[str, ...] = ("add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")


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
    tiny: bool = False  # CPU-sized: built randomly without asking, run by the demo and the tests
    weights: str | None = None  # a seed model: its trained weights ship in worldtune/seeds/<weights>/
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
            name="seed-predict2.5", family="predict2.5", pipeline_class="Cosmos2_5_PredictBasePipeline",
            text_encoder_kind="qwen2.5-vl", transformer=_SEED_25, vae=_SEED_VAE, text_encoder=_TINY_QWEN,
            scheduler_class="UniPCMultistepScheduler", scheduler=_UNIPC_FLOW,
            height=128, width=224, num_frames=17, fps=15, max_sequence_length=256, tiny=True,
            weights="seed-predict2.5",
            description="Seed Cosmos-Predict2.5 of the same classes, trained from scratch on the synthetic "
                        "tabletop scene (docs/models.md): the demo's default",
        ),
        ModelSpec(
            name="tiny-predict2", family="predict2", pipeline_class="Cosmos2VideoToWorldPipeline",
            text_encoder_kind="t5", transformer=_TINY_P2, vae=_TINY_VAE, text_encoder=_TINY_T5,
            scheduler_class="FlowMatchEulerDiscreteScheduler", scheduler=_FLOW_EULER,
            height=64, width=112, num_frames=17, fps=16, max_sequence_length=128, tiny=True,
            description="Tiny random Cosmos-Predict2 of the same classes, for tests and the demo",
        ),
        ModelSpec(
            name="cosmos3-edge", family="cosmos3", pipeline_class="Cosmos3OmniPipeline", text_encoder_kind="tokens",
            transformer=_COSMOS3_EDGE, vae=_WAN22_VAE, text_encoder={}, scheduler_class="UniPCMultistepScheduler",
            scheduler=_UNIPC_COSMOS3, height=480, width=832, num_frames=93, fps=24,  # yaml resolution '480', chunk 93
            max_sequence_length=2050,  # NVIDIA's SFT caption cap (2048 tokens) + end-of-text + start-of-vision
            lora_targets=COSMOS3_LORA_TARGETS,
            description="NVIDIA Cosmos3-Edge (~4B: two Nemotron-2B-sized towers, Wan2.2 VAE)",
        ),
        ModelSpec(
            name="cosmos3-nano", family="cosmos3", pipeline_class="Cosmos3OmniPipeline", text_encoder_kind="tokens",
            transformer=_COSMOS3_NANO, vae=_WAN22_VAE, text_encoder={}, scheduler_class="UniPCMultistepScheduler",
            scheduler=_UNIPC_COSMOS3, height=720, width=1280, num_frames=93, fps=24,  # yaml resolution '720'
            max_sequence_length=2050, lora_targets=COSMOS3_LORA_TARGETS,
            description="NVIDIA Cosmos3-Nano (~16B: two Qwen3-VL-8B-sized towers, Wan2.2 VAE)",
        ),
        ModelSpec(
            name="seed-cosmos3", family="cosmos3", pipeline_class="Cosmos3OmniPipeline", text_encoder_kind="tokens",
            transformer=_SEED_COSMOS3, vae=_SEED_WAN22_VAE, text_encoder={}, scheduler_class="UniPCMultistepScheduler",
            scheduler=_UNIPC_COSMOS3, height=128, width=224, num_frames=17, fps=15, max_sequence_length=1024,
            lora_targets=COSMOS3_LORA_TARGETS, tiny=True, weights="seed-cosmos3",
            description="Seed Cosmos 3 trained by worldtune on its synthetic robot scene, with actions (forward and "
                        "inverse dynamics): real classes, small; see docs/models.md",
        ),
        ModelSpec(
            name="tiny-cosmos3", family="cosmos3", pipeline_class="Cosmos3OmniPipeline", text_encoder_kind="tokens",
            transformer=_TINY_COSMOS3, vae=_TINY_WAN22_VAE, text_encoder={}, scheduler_class="UniPCMultistepScheduler",
            scheduler=_UNIPC_COSMOS3, height=64, width=112, num_frames=17, fps=16,
            # the byte-level tiny tokenizer spends one token per character: ~550 for a demo caption with the chat
            # template and the metadata sentences
            max_sequence_length=1024, lora_targets=COSMOS3_LORA_TARGETS, tiny=True,
            description="Tiny random Cosmos 3 of the same classes (Edge structure), for tests and the demo",
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
