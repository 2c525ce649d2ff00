"""`[model]`: which model the stages load."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from worldtune.config.section import Section


class ModelConfig(Section):
    """Which model: a local diffusers directory or cached hub id (real weights), or a registry name."""

    name: str | None = Field(None, description="registry name (tiny-predict2.5, cosmos-predict2.5-2b, ...); "
                             "None = taken from `path`, or tiny-predict2.5 without one")
    path: str | None = Field(None, description="diffusers-format pipeline folder, or a hub id (org/name) already "
                             "in the local Hugging Face cache; never downloaded")
    revision: str | None = Field(None, description="hub revision (branch, tag or commit) when `path` is a hub id")
    random_weights: bool = Field(False, description="allow a real-size `name` without `path`: random weights "
                                 "(benchmarks only)")
    dtype: Literal["bf16", "fp16", "fp32"] = Field("bf16", description="weights dtype on CUDA (CPU: fp32)")
    seed: int = Field(0, description="seed of random initialisation from a registry spec")
