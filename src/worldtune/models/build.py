"""Build Cosmos components from a spec, randomly initialised, at any size.

Used for the tiny models (tests, demo), real-size random models (GPU benchmarks) and the meta
device (parameter counting). The classes are exactly the ones a real checkpoint loads into, so
every code path downstream is the same at every size.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from worldtune.models.registry import ModelSpec


class NoOpSafetyChecker:
    """Stands in for NVIDIA's guardrail, which the Cosmos pipelines require but cannot fetch offline.

    A plain object, not a module: it holds no weights, is not saved with the pipeline, and does
    not take part in device placement.
    """

    def to(self, *args: Any, **kwargs: Any) -> "NoOpSafetyChecker":
        return self

    def check_text_safety(self, prompt: str) -> bool:
        return True

    def check_video_safety(self, video: Any) -> Any:
        return video


def _seeded(seed: int | None):
    return torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()


def build_transformer(spec: ModelSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """The DiT of a spec. On the meta device no memory is allocated (for counting and planning)."""
    from diffusers import CosmosTransformer3DModel

    with torch.device(device):
        model = CosmosTransformer3DModel(**spec.transformer)
    return model.to(dtype=dtype) if str(device) != "meta" else model


def build_vae(spec: ModelSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    from diffusers import AutoencoderKLWan

    with torch.device(device):
        vae = AutoencoderKLWan(**spec.vae)
    return vae.to(dtype=dtype) if str(device) != "meta" else vae


def build_text_encoder(spec: ModelSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    if spec.text_encoder_kind == "qwen2.5-vl":
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        cfg = Qwen2_5_VLConfig(**spec.text_encoder)
        with torch.device(device):
            model = Qwen2_5_VLForConditionalGeneration(cfg)
    else:
        from transformers import T5Config, T5EncoderModel

        with torch.device(device):
            model = T5EncoderModel(T5Config(**spec.text_encoder))
    model.eval()
    return model.to(dtype=dtype) if str(device) != "meta" else model


def build_tokenizer(spec: ModelSpec):
    from worldtune.models.tokenizer import build_qwen_tokenizer, build_t5_tokenizer

    return build_qwen_tokenizer() if spec.text_encoder_kind == "qwen2.5-vl" else build_t5_tokenizer()


def build_scheduler(spec: ModelSpec):
    import diffusers

    return getattr(diffusers, spec.scheduler_class)(**spec.scheduler)


def pipeline_class(spec: ModelSpec):
    import diffusers

    return getattr(diffusers, spec.pipeline_class)


def build_pipeline(spec: ModelSpec, seed: int | None = 0, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """A complete random-initialised pipeline (every component) for a spec, reproducible from `seed`."""
    with _seeded(seed):
        if seed is not None:
            torch.manual_seed(seed)
        components = dict(
            transformer=build_transformer(spec, device, dtype),
            vae=build_vae(spec, device, torch.float32 if spec.tiny else dtype),
            text_encoder=build_text_encoder(spec, device, dtype),
        )
    return pipeline_class(spec)(
        **components, tokenizer=build_tokenizer(spec), scheduler=build_scheduler(spec),
        safety_checker=NoOpSafetyChecker(),
    )
