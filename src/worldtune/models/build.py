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


@contextlib.contextmanager
def seeded(seed: int | None):
    """Build under a fixed seed without disturbing the caller's random state (None: the current state)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_transformer(spec: ModelSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """The transformer of a spec. On the meta device no memory is allocated (for counting and planning)."""
    from worldtune.models.family import family_of

    return family_of(spec).build_transformer(device, dtype)


def build_vae(spec: ModelSpec, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """The Wan VAE of a spec (Wan2.1 for Predict, the 48-channel Wan2.2 for Cosmos 3)."""
    from diffusers import AutoencoderKLWan

    with torch.device(device):
        vae = AutoencoderKLWan(**spec.vae)
    return vae.to(dtype=dtype) if str(device) != "meta" else vae


def build_scheduler(spec: ModelSpec):
    import diffusers

    return getattr(diffusers, spec.scheduler_class)(**spec.scheduler)


def pipeline_class(spec: ModelSpec):
    from worldtune.models.family import family_of

    return family_of(spec).pipeline_type()


def build_pipeline(spec: ModelSpec, seed: int | None = 0, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """A complete random-initialised pipeline (every component) for a spec, reproducible from `seed`."""
    from worldtune.models.family import family_of

    with seeded(seed):
        return family_of(spec).build_pipeline(device, dtype)
