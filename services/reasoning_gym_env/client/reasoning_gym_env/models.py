"""Wire models of the reasoning-gym environment (shared by client, server, trainer and tests).

``ReasoningGymAction`` and ``ReasoningGymObservation`` carry upstream OpenEnv's names and fields.
``ReasoningGymReset`` is what a ``reset`` carries (the WebSocket frame's ``data``, or the HTTP body),
and the ``*Request`` models are the HTTP bodies. All input models forbid unknown keys: a misspelt
argument is an error naming it, never silently dropped.
"""

from typing import Any

from openenv.core.env_server.types import Action, Observation
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr


class ReasoningGymAction(Action):
    """The agent's answer to the current question."""

    answer: str = Field(..., description="The agent's answer to the current question")


class ReasoningGymObservation(Observation):
    """A question (after reset) or the scored answer (after step)."""

    question: str | None = Field(default=None, description="The current question (reset only)")
    score: float | None = Field(default=None, description="Score of the answer, 0.0 to 1.0 (step only)")
    correct_answer: str | None = Field(default=None, description="The reference answer (step only)")
    dataset_metadata: dict[str, Any] | None = Field(
        default=None, description="Metadata of the reasoning-gym dataset entry (step only)"
    )


class ReasoningGymReset(BaseModel):
    """Arguments of ``reset``: name a dataset (with ``seed`` and ``size``) to build it and get its
    question 0; name none to get the next question of the current one."""

    model_config = ConfigDict(extra="forbid")

    dataset_name: StrictStr | None = Field(default=None, description="reasoning-gym dataset name, or 'composite'")
    dataset_config: dict[str, Any] | None = Field(default=None, description="The dataset's config fields")
    dataset_specs: list[dict[str, Any]] | None = Field(
        default=None, description="For 'composite': [{name, weight, config}, ...]"
    )
    seed: StrictInt | None = Field(default=None, description="Dataset seed (required with dataset_name)")
    size: StrictInt | None = Field(default=None, description="Dataset size (required with dataset_name)")
    episode_id: StrictStr | None = Field(default=None, max_length=255, description="Id reported by state()")


class ReasoningGymResetRequest(ReasoningGymReset):
    """``POST /reset`` body: reset arguments plus the HTTP session fields."""

    session_id: StrictStr | None = Field(default=None, description="Continue this HTTP session")
    open_session: StrictBool = Field(default=False, description="Open an HTTP session and return its session_id")


class ReasoningGymStepRequest(BaseModel):
    """``POST /step`` body (``timeout_s`` and ``request_id`` are upstream's, accepted and unused)."""

    model_config = ConfigDict(extra="forbid")

    action: ReasoningGymAction
    session_id: StrictStr | None = Field(default=None, description="The HTTP session to step")
    timeout_s: float | None = None
    request_id: StrictStr | None = None
