"""OpenEnv-compatible server around the reasoning-gym library."""

from .app import create_app
from .environment import DEFAULT_DATASET, ReasoningGymEnvironment
from .settings import Settings

__all__ = ["create_app", "DEFAULT_DATASET", "ReasoningGymEnvironment", "Settings"]
