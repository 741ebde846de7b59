"""Client for the reasoning-gym OpenEnv server.

Drop-in replacement for upstream OpenEnv's ``reasoning_gym_env`` package: the same names, fields
and behaviour, so code written against a hosted Space runs by changing only ``base_url``.
"""

from .client import ReasoningGymEnv
from .models import (
    ReasoningGymAction,
    ReasoningGymObservation,
    ReasoningGymReset,
    ReasoningGymResetRequest,
    ReasoningGymStepRequest,
)

__all__ = [
    "ReasoningGymEnv",
    "ReasoningGymAction",
    "ReasoningGymObservation",
    "ReasoningGymReset",
    "ReasoningGymResetRequest",
    "ReasoningGymStepRequest",
]
