"""The Cosmos-Predict families: Predict2.5 (2B) and Predict2 Video2World (14B).

Both use diffusers' `CosmosTransformer3DModel` (a DiT with cross-attention to a text embedding),
the 16-channel Wan2.1 VAE and an external text encoder: Qwen2.5-VL (Cosmos-Reason1) for Predict2.5,
T5-11B for Predict2. They differ in three places, all here: Predict2.5 projects the text embedding
inside the transformer (crossattn_proj), so the projected embedding can be cached; Predict2 passes
the clip's fps to the rotary embedding and has no text2world mode; worldtune's own sampler
(batched guidance, multi-view) follows Predict2.5's pipeline only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldtune.models.components import NoOpSafetyChecker, build_scheduler, build_vae
from worldtune.models.family_base import ModelFamily


class _Predict(ModelFamily):
    """What Predict2 and Predict2.5 share."""

    transformer_class = "CosmosTransformer3DModel"
    uses_fps = False
    fused_adaln = True

    def build_transformer(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        from diffusers import CosmosTransformer3DModel

        with torch.device(device):
            model = CosmosTransformer3DModel(**self.spec.transformer)
        return model.to(dtype=dtype) if str(device) != "meta" else model

    def build_text_encoder(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        raise NotImplementedError

    def build_tokenizer(self):
        raise NotImplementedError

    def build_pipeline(self, device: str = "cpu", dtype: torch.dtype = torch.float32):
        spec = self.spec
        components = dict(
            transformer=self.build_transformer(device, dtype),
            vae=build_vae(spec, device, torch.float32 if spec.tiny else dtype),
            text_encoder=self.build_text_encoder(device, dtype),
        )
        return self.pipeline_type()(**components, tokenizer=self.build_tokenizer(),
                                    scheduler=build_scheduler(spec), safety_checker=NoOpSafetyChecker())

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def encode_prompts(self, pipe, prompts: list[str], kind: str, device: torch.device | str | None = None,
                       max_sequence_length: int | None = None, **clip: Any) -> torch.Tensor:
        """Text embeddings exactly as the pipeline computes them (in the text encoder's dtype)."""
        emb, _ = pipe.encode_prompt(prompts, do_classifier_free_guidance=False,
                                    device=torch.device(device) if device is not None else None,
                                    max_sequence_length=max_sequence_length or self.spec.max_sequence_length)
        return emb

    # ------------------------------------------------------------------ training
    def predict(self, model: torch.nn.Module, batch, text: torch.Tensor, dtype: torch.dtype,
                fps: float | None) -> torch.Tensor:
        return model(**transformer_inputs(batch, text, dtype, fps if self.uses_fps else None))[0]

    def train_flops_per_sample(self, frames: int, height: int, width: int, fused_adaln: bool) -> float | None:
        from worldtune.models.flops import train_step_flops

        return float(train_step_flops(self.spec.transformer, frames, height, width,
                                      text_tokens=self.spec.max_sequence_length, per_token_timestep=not fused_adaln))

    def per_block_bytes(self, latent_t: int, latent_h: int, latent_w: int, batch: int, mode: str,
                        fused_adaln: bool, rank: int) -> float | None:
        from worldtune.models.speed import per_block_bytes

        return per_block_bytes(self.spec, latent_t, latent_h, latent_w, batch=batch, mode=mode,
                               fused_adaln=fused_adaln, rank=rank)

    # ------------------------------------------------------------------ generation
    def generate(self, pipe, s, frames: np.ndarray | None, prompt: str, prompt_embeds: torch.Tensor | None,
                 negative_embeds: torch.Tensor | None, noise: torch.Tensor, seed: int) -> np.ndarray:
        """The diffusers pipeline itself, with our noise and cached embeddings (the prompt text is not needed)."""
        from PIL import Image

        kw: dict[str, Any] = dict(prompt_embeds=prompt_embeds, negative_prompt_embeds=negative_embeds, latents=noise,
                                  generator=torch.Generator("cpu").manual_seed(seed), height=s.height, width=s.width,
                                  num_frames=s.num_frames, num_inference_steps=s.steps, guidance_scale=s.guidance,
                                  output_type="np", max_sequence_length=s.max_sequence_length)
        if frames is not None and s.mode == "image2world":
            kw["image"] = Image.fromarray(frames[0])
        elif frames is not None:
            kw["video"] = [Image.fromarray(f) for f in frames]
        kw.update(self._pipeline_kwargs(s))
        return pipe(**kw).frames[0]

    def _pipeline_kwargs(self, s) -> dict[str, Any]:
        return {}

    def sample_from_first_latent(self, transformer: torch.nn.Module, scheduler, x0: torch.Tensor,
                                 text: torch.Tensor, noise: torch.Tensor, steps: int, guidance: float,
                                 fps: float | None = None) -> torch.Tensor:
        from types import SimpleNamespace

        from worldtune.models.predict_sampler import Conditioning, denoise

        dtype = next(transformer.parameters()).dtype
        mask = torch.zeros(1, 1, x0.shape[2], 1, 1, device=x0.device)
        mask[:, :, :1] = 1.0
        cond = Conditioning(latents=noise, cond_latents=x0.float(), cond_mask=mask.expand_as(x0[:, :1]).to(dtype),
                            cond_indicator=mask)
        pipe = SimpleNamespace(transformer=transformer, scheduler=scheduler, vae_scale_factor_spatial=8)
        return denoise(pipe, cond, text.to(dtype), torch.zeros_like(text).to(dtype), steps, guidance)

    # ------------------------------------------------------------------ adapters
    def save_adapter(self, out: Path, state_dict: dict[str, torch.Tensor], metadata: dict[str, Any]) -> Path:
        from diffusers import Cosmos2_5_PredictBasePipeline  # its LoRA writer is the one Predict pipelines load

        Cosmos2_5_PredictBasePipeline.save_lora_weights(
            out, transformer_lora_layers={k: v.detach().float().cpu() for k, v in state_dict.items()},
            transformer_lora_adapter_metadata=metadata, safe_serialization=True)
        return out / "pytorch_lora_weights.safetensors"


class Predict25(_Predict):
    name = "predict2.5"
    label = "Cosmos-Predict2.5"
    pipeline_class = "Cosmos2_5_PredictBasePipeline"
    text_kinds = ("projected", "raw")
    multiview = True
    own_sampler = True

    def build_text_encoder(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        with torch.device(device):
            model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(**self.spec.text_encoder))
        model.eval()
        return model.to(dtype=dtype) if str(device) != "meta" else model

    def build_tokenizer(self):
        from worldtune.models.tokenizer import build_qwen_tokenizer

        return build_qwen_tokenizer()

    @torch.no_grad()
    def encode_prompts(self, pipe, prompts: list[str], kind: str, device: torch.device | str | None = None,
                       max_sequence_length: int | None = None, **clip: Any) -> torch.Tensor:
        """Optionally through crossattn_proj: the projected embedding is 100x smaller to cache."""
        emb = super().encode_prompts(pipe, prompts, kind, device, max_sequence_length)
        if kind == "projected":
            proj = pipe.transformer.crossattn_proj
            emb = proj(emb.to(next(proj.parameters()).dtype))
        return emb

    def trainable_text_kinds(self, full: bool) -> tuple[str, ...]:
        return ("raw",) if full else self.text_kinds  # full fine-tuning trains crossattn_proj itself

    def prepare_for_text(self, transformer: torch.nn.Module, kind: str) -> dict[str, torch.nn.Module]:
        """Projected text was already through crossattn_proj: the transformer must not apply it again."""
        if kind != "projected":
            return {}
        proj, transformer.crossattn_proj = transformer.crossattn_proj, torch.nn.Identity()
        return {"crossattn_proj": proj}

    def generate(self, pipe, s, frames: np.ndarray | None, prompt: str, prompt_embeds: torch.Tensor | None,
                 negative_embeds: torch.Tensor | None, noise: torch.Tensor, seed: int) -> np.ndarray:
        if s.sampler != "worldtune":
            return super().generate(pipe, s, frames, prompt, prompt_embeds, negative_embeds, noise, seed)
        from worldtune.models import predict_sampler as sampler

        cond = sampler.prepare(pipe, frames, noise, s.num_frames, s.height, s.width, s.cond_latent_frames,
                               as_image=s.mode == "image2world")
        latents = sampler.denoise(pipe, cond, prompt_embeds, negative_embeds, s.steps, s.guidance, s.cond_timestep,
                                  batch_guidance=s.batch_guidance)
        return sampler.decode(pipe, latents, s.num_frames)

    def _pipeline_kwargs(self, s) -> dict[str, Any]:
        kw: dict[str, Any] = {"conditional_frame_timestep": s.cond_timestep}
        if s.mode == "video2world":
            kw["num_latent_conditional_frames"] = s.cond_latent_frames
        return kw


class Predict2(_Predict):
    name = "predict2"
    label = "Cosmos-Predict2"
    pipeline_class = "Cosmos2VideoToWorldPipeline"
    modes = ("image2world", "video2world")  # Video2World has no text-only mode
    uses_fps = True  # the clip's frame rate goes to the rotary embedding

    def build_text_encoder(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        from transformers import T5Config, T5EncoderModel

        with torch.device(device):
            model = T5EncoderModel(T5Config(**self.spec.text_encoder))
        model.eval()
        return model.to(dtype=dtype) if str(device) != "meta" else model

    def build_tokenizer(self):
        from worldtune.models.tokenizer import build_t5_tokenizer

        return build_t5_tokenizer()

    def _pipeline_kwargs(self, s) -> dict[str, Any]:
        return {"fps": s.fps}  # what training passed: the clips' frame rate (the pipeline forwards it to the DiT)


def transformer_inputs(batch, text: torch.Tensor, dtype: torch.dtype, fps: float | None = None) -> dict:
    """Keyword arguments of CosmosTransformer3DModel.forward for a noised FlowBatch."""
    b, _, t, h, w = batch.x_t.shape
    keep = batch.text_keep.view(b, 1, 1).to(text.dtype)
    kwargs = dict(
        hidden_states=batch.x_t.to(dtype),
        timestep=batch.timestep.to(dtype),
        encoder_hidden_states=(text * keep).to(dtype),
        condition_mask=batch.condition_mask.to(dtype),
        padding_mask=batch.x_t.new_zeros(1, 1, h, w, dtype=dtype),
        return_dict=False,
    )
    if fps is not None:
        kwargs["fps"] = fps
    return kwargs
