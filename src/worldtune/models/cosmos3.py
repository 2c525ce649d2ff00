"""The Cosmos 3 family: one mixture-of-transformers model, text tokens in the sequence, a 48-channel VAE.

diffusers' `Cosmos3OmniTransformer` runs two towers over one packed sequence: a causal "reasoner"
(understanding) tower over the text tokens and a bidirectional "generator" tower over the video
latent patches, whose attention reads the keys and values of both. There is no separate text
encoder: the transformer embeds token ids itself, so what worldtune caches per prompt is the
token-id sequence the pipeline would build (chat template, the resolution/duration sentences it
appends, end-of-text and start-of-vision tokens).

Training reuses the pipeline's own sequence builders (`_prepare_text_segment`,
`_prepare_vision_segment`) so a training step sees exactly the sequence, rotary positions and
timestep convention of a sampling step: the generator gets `timestep = sigma * 1000` on its noisy
frames only (the model scales it by `timestep_scale` = 0.001), the conditioning frames stay clean
and get no timestep embedding, and the velocity comes back in latent layout with zeros on the
conditioning frames — so worldtune's generic objective (`train/flow.py`) applies unchanged.

What NVIDIA's framework does for Cosmos 3 video post-training, and where worldtune follows or
differs, is written down in docs/cosmos3.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldtune.errors import DatasetError
from worldtune.models.components import build_scheduler, build_vae
from worldtune.models.cosmos3_dynamics import Cosmos3Dynamics
from worldtune.models.cosmos3_pipeline import (NUM_TRAIN_TIMESTEPS, PAD_ID, VAE_TEMPORAL,  # noqa: F401 (re-exported)
                                              encode_leading_frames, sample_clean_first, transformer_inputs)
from worldtune.models.family_base import ModelFamily
from worldtune.models.flops import FlopCount

TIME_PROJ_DIM = 256  # Cosmos3OmniTransformer's sinusoidal timestep width (time_proj -> time_embedder)
# Text tokens assumed for FLOP figures: a plain caption with the chat template and metadata sentences is a few
# hundred tokens; NVIDIA's structured JSON captions run to ~1,800 (their cap is 2,048).
DEFAULT_TEXT_TOKENS = 512

# The generator pathway of Cosmos3OmniTransformer, by parameter-name fragment: its attention projections and
# q/k norms, MLP and norms (the "_moe_gen" modules), the latent patch projections in and out, the timestep
# embedding, and the reasoner-key norm the generator applies (Edge). NVIDIA's vision fine-tuning recipes train
# exactly these (vision_sft_edge.py optimizer keys_to_select: moe_gen, time_embedder, vae2llm, llm2vae,
# k_norm_und_for_gen); everything else is the reasoner, which stays frozen.
GENERATOR_LAYER_PARAMS: tuple[str, ...] = ("add_q_proj", "add_k_proj", "add_v_proj", "to_add_out", "norm_added_q",
                                           "norm_added_k", "_moe_gen", "k_norm_und_for_gen")
GENERATOR_TOP_PARAMS: tuple[str, ...] = ("proj_in.", "proj_out.", "time_embedder.")

# NVIDIA's video post-training objective for Cosmos 3 (cosmos-framework: Cosmos3-*.yaml
# rectified_flow_training_config, vision_sft_edge.py / vision_sft_nano.py dataset settings).
SHIFT_BY_TIER = {256: 3.0, 480: 5.0, 720: 10.0}  # shift: {"256": 3, "480": 5, "720": 10}
COND_FRAMES_PROBS = ((0, 0.7), (1, 0.2), (2, 0.1))  # conditioning_config {0: 0.7, 1: 0.2, 2: 0.1}
TEXT_DROPOUT = 0.1  # cfg_dropout_rate


def resolution_tier(height: int, width: int) -> int:
    """The resolution tier NVIDIA keys the time shift on: by the short side, <=256, <=640 -> 480, else 720."""
    short = min(height, width)
    return 256 if short <= 256 else 480 if short <= 640 else 720


def recipe_objective(height: int, width: int) -> dict[str, Any]:
    """NVIDIA's Cosmos 3 video objective for clips of this size, as FlowMatchingLoss settings."""
    return {"time_distribution": "waver", "shift": SHIFT_BY_TIER[resolution_tier(height, width)],
            "cond_frames_probs": COND_FRAMES_PROBS, "text_dropout": TEXT_DROPOUT}


def is_structured_caption(prompt: str) -> bool:
    """A JSON-object caption (what NVIDIA's prompt upsampler writes) already carries duration, fps and
    resolution, so NVIDIA's dataset appends no metadata sentences to it; worldtune does the same."""
    try:
        return isinstance(json.loads(prompt), dict)
    except ValueError:
        return False


def template_flags(prompt: str) -> dict[str, bool]:
    """`add_resolution_template` / `add_duration_template` for one prompt, for the cache and generation alike."""
    plain = not is_structured_caption(prompt)
    return {"add_resolution_template": plain, "add_duration_template": plain}


def prompt_token_ids(pipe, prompt: str, num_frames: int, height: int, width: int, fps: float) -> tuple[list[int], list[int]]:
    """(prompt ids, dropped-text ids) exactly as the pipeline tokenizes: its chat template, system-prompt
    setting and metadata sentences. The dropped text is an empty caption without metadata — what NVIDIA's
    caption dropout trains (cfg_dropout_keep_metadata = False) for classifier-free guidance."""
    ids, _ = pipe.tokenize_prompt(prompt, None, num_frames=num_frames, height=height, width=width, fps=fps,
                                  **template_flags(prompt))
    empty, _ = pipe.tokenize_prompt("", None, num_frames=num_frames, height=height, width=width, fps=fps,
                                    add_resolution_template=False, add_duration_template=False)
    return ids, empty


def forward_flops(cfg: Mapping[str, Any], frames: int, height: int, width: int, text_tokens: int,
                  cond_frames: int = 0, batch: int = 1) -> FlopCount:
    """FLOPs of `batch` transformer forwards (the model packs one sample per call), matmul by matmul as
    diffusers 0.42 runs them; 2*m*k*n per matmul, norms and activations not counted (FlopCounterMode's rule).

    Attention is counted in full: the reasoner's causal attention as a dense N_t x N_t product (what the
    SDPA math kernel and FlopCounterMode count), the generator's over all N_t + N_v keys."""
    d, inter, layers = int(cfg["hidden_size"]), int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"])
    hd, heads, kv = int(cfg["head_dim"]), int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    p, patch_dim = int(cfg["latent_patch_size"]), int(cfg["patch_latent_dim"])
    t_lat = (frames - 1) // Cosmos3.vae_temporal + 1
    tokens_per_frame = math.ceil(height // Cosmos3.vae_spatial / p) * math.ceil(width // Cosmos3.vae_spatial / p)
    nv, nt = t_lat * tokens_per_frame, text_tokens
    noisy = (t_lat - min(cond_frames, t_lat)) * tokens_per_frame
    q, kvw = heads * hd, kv * hd
    mlp_mats = 3 if cfg.get("hidden_act", "silu") == "silu" else 2  # gate, up, down / up, down (relu2)
    parts = {
        "proj_in": 2 * nv * patch_dim * d,
        "time_embedding": 2 * noisy * (TIME_PROJ_DIM * d + d * d),  # one timestep per noisy token
        "rotary": 2 * 3 * (hd // 2) * (nt + nv),
        "attn_proj": layers * 2 * (nt + nv) * (2 * d * q + 2 * d * kvw),  # q, o and k, v in both towers
        "reasoner_attention": layers * 4 * heads * hd * nt * nt,
        "generator_attention": layers * 4 * heads * hd * nv * (nt + nv),
        "mlp": layers * mlp_mats * 2 * (nt + nv) * d * inter,
        "proj_out": 2 * noisy * d * patch_dim,
    }
    return FlopCount({k: batch * v for k, v in parts.items()})


class Cosmos3(ModelFamily):
    name = "cosmos3"
    label = "Cosmos 3"
    pipeline_class = "Cosmos3OmniPipeline"
    transformer_class = "Cosmos3OmniTransformer"
    modes = ("text2world", "image2world", "video2world")
    text_kinds = ("tokens",)
    text_components = ("text_tokenizer",)
    text_depends_on_clip = True  # the resolution and duration sentences the pipeline appends
    vae_spatial = 16  # Wan2.2 VAE: 16x spatial, 4x temporal, 48 channels
    vae_temporal = VAE_TEMPORAL
    patch = 2
    prompt_embeddings = False  # the pipeline tokenizes the prompt text; the transformer embeds the ids itself
    compile_dynamic = None  # text length differs per prompt and between the guidance branches
    dynamics_class = Cosmos3Dynamics  # the action tasks, through the pipeline's action modes

    # ------------------------------------------------------------------ building
    def build_transformer(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        from diffusers import Cosmos3OmniTransformer

        with torch.device(device):
            model = Cosmos3OmniTransformer(**self.spec.transformer)
        return model.to(dtype=dtype) if str(device) != "meta" else model

    def build_pipeline(self, device: str = "cpu", dtype: torch.dtype = torch.float32):
        """Transformer, 48-channel VAE, an offline byte-level Qwen-style tokenizer and the UniPC scheduler.

        The guardrail is switched off in the saved config (it cannot be fetched offline), and the system
        prompt is off as in NVIDIA's training and released configs (use_system_prompt: false)."""
        from worldtune.models.tokenizer import build_qwen_tokenizer

        spec = self.spec
        return self.pipeline_type()(
            transformer=self.build_transformer(device, dtype),
            vae=build_vae(spec, device, torch.float32 if spec.tiny else dtype),
            text_tokenizer=build_qwen_tokenizer(), scheduler=build_scheduler(spec),
            enable_safety_checker=False, default_use_system_prompt=False)

    @property
    def pixel_multiple(self) -> int:
        """The transformer pads an odd latent grid itself, so any multiple of the VAE stride works (e.g. 720p)."""
        return self.vae_spatial

    def latent_channels(self, pipe) -> int:
        return pipe.transformer.config.latent_channel

    def text_encoder(self, pipe) -> torch.nn.Module | None:
        return None  # text tokens are embedded by the transformer itself

    def generator_parameters(self, transformer: torch.nn.Module) -> list[str]:
        """Names of the generator pathway's parameters: what a full fine-tune trains (the reasoner stays frozen)."""
        return [n for n, _ in transformer.named_parameters()
                if n.startswith(GENERATOR_TOP_PARAMS) or any(k in n for k in GENERATOR_LAYER_PARAMS)]

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def encode_prompts(self, pipe, prompts: list[str], kind: str, device: torch.device | str | None = None,
                       max_sequence_length: int | None = None, *, num_frames: int | None = None,
                       height: int | None = None, width: int | None = None, fps: float | None = None) -> torch.Tensor:
        """Token ids [N, 2, L] (int64, padded with -1): row 0 the prompt, row 1 the dropped text.

        The ids depend on the tokenizer, the pipeline's system-prompt setting and, through the metadata
        sentences, on the clip's frames, size and fps (the spec's defaults where not given): a cache of them
        is keyed by all of these."""
        s = self.spec
        shape = (num_frames or s.num_frames, height or s.height, width or s.width, fps or s.fps)
        length = max_sequence_length or s.max_sequence_length
        out = torch.full((len(prompts), 2, length), PAD_ID, dtype=torch.long)
        for i, prompt in enumerate(prompts):
            for j, ids in enumerate(prompt_token_ids(pipe, prompt, *shape)):
                if len(ids) > length:
                    raise DatasetError(f"prompt {prompt[:60]!r}... is {len(ids)} tokens with the chat template and "
                                       f"metadata, over the model's {length}: shorten the caption")
                out[i, j, :len(ids)] = torch.tensor(ids)
        return out.to(device) if device is not None else out

    # ------------------------------------------------------------------ training
    def objective_defaults(self, height: int, width: int) -> dict[str, Any]:
        return recipe_objective(height, width)

    def full_finetune_parameters(self, transformer: torch.nn.Module) -> list[torch.nn.Parameter]:
        """The generator pathway (NVIDIA's vision fine-tuning trains exactly it); the reasoner stays frozen."""
        names = set(self.generator_parameters(transformer))
        params = []
        for n, p in transformer.named_parameters():
            p.requires_grad_(n in names)
            if n in names:
                params.append(p)
        return params

    def predict(self, model: torch.nn.Module, batch, text: torch.Tensor, dtype: torch.dtype,
                fps: float | None) -> torch.Tensor:
        """Velocity [B, 48, T, H, W] for a noised FlowBatch; samples whose packed sequences have one shape share
        a transformer call (models/cosmos3_batch.py). `text` is `encode_prompts`' [B, 2, L]; `batch.text_keep`
        picks the row."""
        from worldtune.models.cosmos3_batch import call_grouped
        from worldtune.train.adapters import unwrap

        config = unwrap(model).config
        kws = []
        for b in range(batch.x_t.shape[0]):
            ids = text[b, 0 if bool(batch.text_keep[b] > 0) else 1]
            kws.append(transformer_inputs(config, ids[ids != PAD_ID], batch.x_t[b:b + 1].to(dtype),
                                          batch.timestep[b, 0, :, 0, 0], int(batch.num_cond[b]), fps))
        return torch.cat([video for video, _, _ in call_grouped(model, kws)])

    def sample_from_first_latent(self, transformer: torch.nn.Module, scheduler, x0: torch.Tensor,
                                 text: torch.Tensor, noise: torch.Tensor, steps: int, guidance: float,
                                 fps: float | None = None) -> torch.Tensor:
        """The pipeline's image-to-video loop on cached inputs (see `sample_clean_first`)."""
        return sample_clean_first(transformer, scheduler, x0, text, noise, steps, guidance,
                                  lambda config, ids, x, sigma: transformer_inputs(config, ids, x, sigma, 1, fps))

    def forward_flops(self, frames: int, height: int, width: int, batch: int = 1,
                      text_tokens: int | None = None, cond_frames: int = 0) -> FlopCount:
        return forward_flops(self.spec.transformer, frames, height, width,
                             text_tokens or DEFAULT_TEXT_TOKENS, cond_frames, batch)

    def train_flops_per_sample(self, frames: int, height: int, width: int, fused_adaln: bool) -> float | None:
        return 3.0 * self.forward_flops(frames, height, width).total

    def info_numbers(self, frames: int, height: int, width: int, batch: int, lora_rank: int,
                     mode: str) -> dict[str, Any] | None:
        """Parameters (meta build), adapter size on the generator targets, tokens and FLOPs of a clip."""
        from worldtune.models.params import count_params

        model = self.build_transformer("meta")
        pc = count_params(model, self.lora_targets, lora_rank)
        names = set(self.generator_parameters(model))
        generator = sum(p.numel() for n, p in model.named_parameters() if n in names)
        t, h, w = self.latent_size(frames, height, width)
        fwd = self.forward_flops(frames, height, width, batch)
        per_frame = math.ceil(h / self.patch) * math.ceil(w / self.patch)
        return {
            "model": self.spec.name, "family": self.name, "frames": frames, "height": height, "width": width,
            "batch": batch, "params": pc.total, "generator_params": generator, "lora_rank": lora_rank,
            "lora_params": pc.lora, "dora_params": pc.adapter(dora=True), "lora_modules": pc.targeted_modules,
            "latent_shape": (int(self.spec.transformer["latent_channel"]), t, h, w), "tokens": t * per_frame,
            "text_tokens": DEFAULT_TEXT_TOKENS, "forward_flops": fwd.total, "attention_share": fwd.attention_share,
            "train_step_flops": 3 * fwd.total, "flop_parts": dict(fwd.parts), "mode": mode,
            **self._activation_numbers(frames, height, width, batch, lora_rank, mode),
        }

    def _activation_numbers(self, frames: int, height: int, width: int, batch: int, lora_rank: int,
                            mode: str) -> dict[str, Any]:
        """`model info`'s activation rows: eager counts (what autograd keeps), LoRA only."""
        if mode != "lora":
            return {"activation_bytes_no_ckpt": None, "activation_bytes_full_ckpt": None}
        from worldtune.models.cosmos3_memory import estimate_activations

        layers = int(self.spec.transformer["num_hidden_layers"])
        return {f"activation_bytes_{k}": estimate_activations(
            self.spec.transformer, frames, height, width, batch, lora_rank, n, DEFAULT_TEXT_TOKENS,
            compiled=False).total for k, n in (("no_ckpt", 0), ("full_ckpt", layers))}

    def memory_model(self, frames: int, height: int, width: int, batch: int, mode: str, lora_rank: int,
                     checkpointed_blocks: int, selective: bool, compiled: bool, text_tokens: int | None = None,
                     action_steps: int = 0):
        """The planner's inputs for a LoRA step (models/cosmos3_memory.py); other modes are not modelled."""
        if mode != "lora":
            from worldtune.errors import ModelError

            raise ModelError(f"{self.spec.name}: the memory planner models Cosmos 3 LoRA training only, not "
                             f"{mode}; use --mode lora")
        from worldtune.models.cosmos3_memory import estimate_activations
        from worldtune.models.params import count_params

        model = self.build_transformer("meta")
        pc = count_params(model, self.lora_targets, lora_rank)
        block = sum(p.numel() for p in model.layers[0].parameters())
        act = estimate_activations(self.spec.transformer, frames, height, width, batch, lora_rank,
                                   checkpointed_blocks, text_tokens or DEFAULT_TEXT_TOKENS, selective, compiled,
                                   action_steps)
        return pc, block, len(model.layers), act

    # ------------------------------------------------------------------ generation
    def default_negative_prompt(self, pipe) -> str | None:
        return None  # the pipeline's: an empty caption with the inverse duration and resolution sentences

    def generate(self, pipe, s, frames: np.ndarray | None, prompt: str, prompt_embeds: torch.Tensor | None,
                 negative_embeds: torch.Tensor | None, noise: torch.Tensor, seed: int) -> np.ndarray:
        """`Cosmos3OmniPipeline.__call__` itself, one video per call, as uint8 frames [T, H, W, 3]: the latents of
        `generate_latents`, decoded by `decode_latents`."""
        return self.decode_latents(pipe, self.generate_latents(pipe, s, frames, prompt, prompt_embeds, negative_embeds,
                                                               noise, seed))

    def generate_latents(self, pipe, s, frames: np.ndarray | None, prompt: str, prompt_embeds: torch.Tensor | None,
                         negative_embeds: torch.Tensor | None, noise: torch.Tensor, seed: int) -> torch.Tensor:
        """The pipeline's sampled latents (VAE-encoding only the conditioning frames).

        The pipeline draws its noise from `generator`: a CPU generator seeded with `seed` draws exactly `noise`
        (torch.randn on the CPU in float32, then moved). Passing `latents=noise` instead would skip the pipeline's
        mixing of the clean conditioning frames into the initial latents. The prompt's metadata sentences follow
        `template_flags`, as in the cache, so a structured caption gets none. The pipeline's video guardrail is not
        run (worldtune loads none)."""
        from PIL import Image

        leading = 0 if frames is None else 1 if s.mode == "image2world" else 4 * (s.cond_latent_frames - 1) + 1
        kw: dict[str, Any] = dict(
            negative_prompt=s.negative_prompt, num_frames=s.num_frames, height=s.height, width=s.width, fps=s.fps,
            num_inference_steps=s.steps, guidance_scale=s.guidance, generator=torch.Generator("cpu").manual_seed(seed),
            output_type="latent", **template_flags(prompt))
        if frames is not None and s.mode == "image2world":
            kw["image"] = Image.fromarray(frames[0])
        elif frames is not None:
            kw["video"] = [Image.fromarray(f) for f in frames]
            kw["condition_frame_indexes_vision"] = tuple(range(s.cond_latent_frames))
        with encode_leading_frames(pipe, leading):
            return pipe(prompt, **kw).video

    def decode_latents(self, pipe, sampled: torch.Tensor, vae: torch.nn.Module | None = None) -> np.ndarray:
        """`decode_to_frames`: straight to uint8 on the device, equal to the pipeline's float video through
        `to_uint8`."""
        from worldtune.models.frames import decode_to_frames

        return decode_to_frames(pipe, sampled, vae)

    # ------------------------------------------------------------------ adapters
    def save_adapter(self, out: Path, state_dict: dict[str, torch.Tensor], metadata: dict[str, Any]) -> Path:
        """`pytorch_lora_weights.safetensors` in diffusers' LoRA format (keys under `transformer.`, the peft
        config in the file metadata so alpha and DoRA survive), which `Cosmos3OmniTransformer.load_lora_adapter`
        reads as is. diffusers has no Cosmos 3 pipeline LoRA loader, so the generic writer is used."""
        from diffusers.loaders.lora_base import LORA_WEIGHT_NAME_SAFE, LoraBaseMixin

        LoraBaseMixin._save_lora_weights(
            out, lora_layers={"transformer": {k: v.detach().float().cpu() for k, v in state_dict.items()}},
            lora_metadata={"transformer": metadata}, safe_serialization=True)
        return Path(out) / LORA_WEIGHT_NAME_SAFE

    def adapter_info(self) -> dict[str, Any]:
        t = self.spec.transformer
        return {"base_model": self.spec.name, "family": self.name, "hidden_size": t["hidden_size"],
                "num_layers": t["num_hidden_layers"]}
