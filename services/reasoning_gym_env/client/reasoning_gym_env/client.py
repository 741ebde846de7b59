"""WebSocket client for the reasoning-gym environment server."""

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import State

from .models import ReasoningGymAction, ReasoningGymObservation


class ReasoningGymEnv(EnvClient[ReasoningGymAction, ReasoningGymObservation, State]):
    """Stateful session with a reasoning-gym environment server over ``/ws``.

    ``reset(dataset_name=..., dataset_config=..., seed=..., size=...)`` builds a dataset and returns
    its first question; a bare ``reset()`` moves to the next question; ``step(ReasoningGymAction(
    answer=...))`` scores the answer and ends the episode. Use ``.sync()`` for a blocking client.
    """

    def _step_payload(self, action: ReasoningGymAction) -> dict[str, Any]:
        return {"answer": action.answer}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ReasoningGymObservation]:
        obs = payload.get("observation", {})
        observation = ReasoningGymObservation(
            question=obs.get("question"),
            score=obs.get("score"),
            correct_answer=obs.get("correct_answer"),
            dataset_metadata=obs.get("dataset_metadata"),
            done=payload.get("done", False),
            reward=payload.get("reward"),
            metadata=obs.get("metadata") or {},
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)
