"""The components two families share, built from a spec: the Wan VAE, the scheduler and the guardrail stand-in.

A concrete family (models/cosmos3.py, models/predict.py) builds its pipeline from these; they read only the spec,
so the family modules need nothing of the registry (models/family.py) or of models/build.py, which asks it.
"""

from __future__ import annotations

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


def build_vae(spec: ModelSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """The Wan VAE of a spec (Wan2.1 for Predict, the 48-channel Wan2.2 for Cosmos 3)."""
    from diffusers import AutoencoderKLWan

    with torch.device(device):
        vae = AutoencoderKLWan(**spec.vae)
    return vae.to(dtype=dtype) if str(device) != "meta" else vae


def build_scheduler(spec: ModelSpec):
    import diffusers

    return getattr(diffusers, spec.scheduler_class)(**spec.scheduler)
