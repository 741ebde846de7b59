"""Wire models of the reasoning-gym environment (shared by client and server)."""

from typing import Any, Dict, Optional

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class ReasoningGymAction(Action):
    """The agent's answer to the current question."""

    answer: str = Field(..., description="The agent's answer to the current question")


class ReasoningGymObservation(Observation):
    """A question (after reset) or the scored answer (after step)."""

    question: Optional[str] = Field(default=None, description="The current question (reset only)")
    score: Optional[float] = Field(default=None, description="Score of the answer, 0.0 to 1.0 (step only)")
    correct_answer: Optional[str] = Field(default=None, description="The reference answer (step only)")
    dataset_metadata: Optional[Dict[str, Any]] = Field(
        default=None, description="Metadata of the reasoning-gym dataset entry (step only)"
    )
