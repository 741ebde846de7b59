"""The trainer's configuration: the schema (``schema``), loading a YAML file with ``TRAINER_*`` and
``--set`` overrides into it (``loading``), and the reference ``python -m trainer config`` prints."""

from .errors import ConfigError
from .loading import bundled_config, load_config
from .schema import (
    JOB_SECTIONS,
    CollectConfig,
    EvalConfig,
    InferenceConfig,
    OpenCodeConfig,
    PretrainConfig,
    ReasoningGymConfig,
    TrainerConfig,
    WeightSyncConfig,
)

__all__ = [
    "JOB_SECTIONS",
    "CollectConfig",
    "ConfigError",
    "EvalConfig",
    "InferenceConfig",
    "OpenCodeConfig",
    "PretrainConfig",
    "ReasoningGymConfig",
    "TrainerConfig",
    "WeightSyncConfig",
    "bundled_config",
    "load_config",
]
