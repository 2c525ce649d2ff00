"""Typed configs for every stage, loaded from TOML and overridable from the command line.

One TOML file may hold any of the sections `[model]`, `[prepare]`, `[cache]`, `[train]`,
`[generate]`, `[evaluate]`, `[report]`; each command reads the sections it needs. Every field has
a default that works on the tiny demo, so an empty file is a valid config. Overrides use dotted
paths, torchtitan style: `--train.steps 100 --train.lora.rank 8`.
"""

from __future__ import annotations

from worldtune.config.autoencoder import AutoencoderConfig  # noqa: F401
from worldtune.config.cache import CacheConfig  # noqa: F401
from worldtune.config.evaluate import ActionEvalConfig, CompareConfig, EvaluateConfig, ReportConfig  # noqa: F401
from worldtune.config.generate import AdapterSpec, GenerateConfig  # noqa: F401
from worldtune.config.idm import Cosmos3LabelConfig, IdmConfig, TrajectoriesConfig  # noqa: F401
from worldtune.config.loading import _parse_value, describe_fields, dump_config, load_config, parse_overrides  # noqa: F401
from worldtune.config.model import ModelConfig  # noqa: F401
from worldtune.config.prepare import ActionsConfig, GridConfig, PrepareConfig  # noqa: F401
from worldtune.config.root import WorldtuneConfig  # noqa: F401
from worldtune.config.section import Section, _check_4k1  # noqa: F401
from worldtune.config.serve import ServeConfig, ServeJudgeConfig  # noqa: F401
from worldtune.config.train import (ACTION_TASKS, ACTION_TIERS, CheckpointConfig, DynamicsConfig,  # noqa: F401
                                    LoraConfig, TrainConfig)
from worldtune.errors import ConfigError  # noqa: F401
