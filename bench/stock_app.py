"""The same episodes served by OpenEnv's stock ``create_app`` with default settings (the baseline).

The environment runs reasoning-gym inline, as upstream's does (no worker processes, no bounds).
Only ``max_concurrent_envs`` is raised (the stock default of 1 refuses a second session); all else,
including the per-session thread executor, is the framework's.
"""

from typing import Any

import reasoning_gym
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State
from reasoning_gym_env import ReasoningGymAction, ReasoningGymObservation


class InlineEnvironment(Environment[ReasoningGymAction, ReasoningGymObservation, State]):
    """reset(dataset_name, seed, size, dataset_config) builds inline; a bare reset serves the next question."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._dataset: Any = None
        self._index = 0
        self._entry: dict | None = None

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        dataset_name: str | None = None,
        dataset_config: dict | None = None,
        size: int | None = None,
        **_: Any,
    ) -> ReasoningGymObservation:
        if dataset_name is not None or self._dataset is None:
            self._dataset = reasoning_gym.create_dataset(
                dataset_name or "leg_counting",
                seed=42 if seed is None else seed,
                size=size or 1000,
                **(dataset_config or {}),
            )
            self._index = 0
        self._entry = self._dataset[self._index % len(self._dataset)]
        self._index += 1
        return ReasoningGymObservation(question=self._entry["question"], reward=0.0, done=False)

    def step(self, action: ReasoningGymAction, timeout_s: float | None = None, **_: Any) -> ReasoningGymObservation:
        score = float(self._dataset.score_answer(answer=action.answer, entry=self._entry))
        return ReasoningGymObservation(score=score, correct_answer=str(self._entry["answer"]), reward=score, done=True)

    @property
    def state(self) -> State:
        return State(step_count=self._index)


app = create_app(
    InlineEnvironment,
    ReasoningGymAction,
    ReasoningGymObservation,
    env_name="reasoning_gym",
    max_concurrent_envs=64,
)
