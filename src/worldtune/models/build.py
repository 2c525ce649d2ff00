"""Build Cosmos components from a spec, randomly initialised, at any size.

Used for the tiny models (tests, demo), real-size random models (GPU benchmarks) and the meta
device (parameter counting). The classes are exactly the ones a real checkpoint loads into, so
every code path downstream is the same at every size.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from worldtune.models.components import NoOpSafetyChecker, build_scheduler, build_vae
from worldtune.models.registry import ModelSpec

__all__ = ["NoOpSafetyChecker", "build_pipeline", "build_scheduler", "build_transformer", "build_vae",
           "pipeline_class", "seeded", "with_transformer_changes"]


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


def with_transformer_changes(spec: ModelSpec, changes: dict[str, Any]) -> ModelSpec:
    """The spec with its transformer's config changed (a seed recipe's next architecture, an overfit check's
    variant), keeping derived sizes consistent: Cosmos 3's `patch_latent_dim` follows its latent patch."""
    config = {**spec.transformer, **changes}
    if "patch_latent_dim" in config:
        config["patch_latent_dim"] = config["latent_patch_size"] ** 2 * config["latent_channel"]
    return dataclasses.replace(spec, transformer=config)


def pipeline_class(spec: ModelSpec):
    from worldtune.models.family import family_of

    return family_of(spec).pipeline_type()


def build_pipeline(spec: ModelSpec, seed: int | None = 0, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """A complete random-initialised pipeline (every component) for a spec, reproducible from `seed`."""
    from worldtune.models.family import family_of

    with seeded(seed):
        return family_of(spec).build_pipeline(device, dtype)
