"""`WorldtuneConfig`: a whole config file, one section per stage."""

from __future__ import annotations

from pydantic import Field

from worldtune.config.autoencoder import AutoencoderConfig
from worldtune.config.cache import CacheConfig
from worldtune.config.evaluate import CompareConfig, EvaluateConfig, ReportConfig
from worldtune.config.generate import GenerateConfig
from worldtune.config.idm import IdmConfig, TrajectoriesConfig
from worldtune.config.model import ModelConfig
from worldtune.config.prepare import PrepareConfig
from worldtune.config.section import Section
from worldtune.config.serve import ServeConfig
from worldtune.config.train import TrainConfig


class WorldtuneConfig(Section):
    """A whole config file: one section per stage (plus `[model]`, shared by the stages that load it)."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    autoencoder: AutoencoderConfig = Field(default_factory=AutoencoderConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    compare: CompareConfig = Field(default_factory=CompareConfig)
    idm: IdmConfig = Field(default_factory=IdmConfig)
    trajectories: TrajectoriesConfig = Field(default_factory=TrajectoriesConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
