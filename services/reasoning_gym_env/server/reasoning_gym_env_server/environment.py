"""The reasoning-gym environment: one question per episode, scored by the dataset itself."""

import asyncio
from typing import Any
from uuid import uuid4

from openenv.core.env_server.types import EnvironmentMetadata, State
from reasoning_gym_env import ReasoningGymAction, ReasoningGymObservation, ReasoningGymReset

from .errors import EnvInputError, ErrorCode
from .pool import WorkerPool
from .questions import Question, QuestionStream
from .spec import DatasetRequest, dataset_request

# Used by a bare reset() when no dataset was built yet (same default as upstream).
DEFAULT_DATASET = DatasetRequest("leg_counting", seed=42, size=1000, config={})

BARE_RESET = ReasoningGymReset()

METADATA = EnvironmentMetadata(
    name="reasoning_gym",
    description="reasoning-gym procedurally generated reasoning tasks, scored by the dataset",
    version="0.1.0",
    author="rlstack",
)


class EpisodeCounter:
    """Answers scored by every environment of one server (``/health``: a replica's share of the work)."""

    def __init__(self) -> None:
        self.total = 0


class ReasoningGymEnvironment:
    """Single-step episodes over a reasoning-gym dataset, with all dataset code run by ``pool``.

    ``reset`` with a ``dataset_name`` (and ``seed``, ``size``, optionally ``dataset_config`` or
    ``dataset_specs``) builds a dataset and returns its first question; a bare ``reset`` returns the
    next question (wrapping around), building ``DEFAULT_DATASET`` first if needed; ``step(action)``
    scores the answer with the dataset's own
    ``score_answer`` and ends the episode (reward = score). A reset that fails leaves the dataset,
    the position and the open question as they were. Calls on one environment run one at a time.
    """

    def __init__(self, pool: WorkerPool, max_dataset_size: int, episodes: EpisodeCounter | None = None) -> None:
        self._pool = pool
        self._episodes = episodes or EpisodeCounter()
        self._max_dataset_size = max_dataset_size
        self._lock = asyncio.Lock()
        self._stream: QuestionStream | None = None
        self._question: Question | None = None
        self._episode_id: str | None = None
        self._step_count = 0

    async def reset(self, arguments: ReasoningGymReset | None = None) -> ReasoningGymObservation:
        """Start an episode; see the class docstring for the argument rules."""
        arguments = arguments or BARE_RESET
        name = arguments.dataset_name
        if name is None and (
            arguments.dataset_config is not None or arguments.dataset_specs is not None or arguments.size is not None
        ):
            raise EnvInputError("'dataset_config', 'dataset_specs' and 'size' need 'dataset_name'")
        if name is not None or self._stream is None:
            request = (
                dataset_request(
                    name,
                    arguments.seed,
                    arguments.size,
                    self._max_dataset_size,
                    arguments.dataset_config,
                    arguments.dataset_specs,
                )
                if name is not None
                else DEFAULT_DATASET
            )
        async with self._lock:
            if name is not None or self._stream is None:
                stream = await QuestionStream.open(self._pool, request)
                if self._stream is not None:
                    self._stream.close()
                self._stream = stream
            self._question = await self._stream.next()
            self._episode_id = arguments.episode_id  # None: a fresh id, made when state asks for it
            self._step_count = 0
        return ReasoningGymObservation(question=self._question.entry["question"], reward=0.0, done=False)

    async def step(self, action: ReasoningGymAction) -> ReasoningGymObservation:
        """Score ``action.answer`` against the current question; always ends the episode.

        An answer whose scoring overruns the worker's deadline or memory bound, or makes the
        dataset's scorer raise, scores 0.0 and says why in ``metadata["scoring_error"]``.
        """
        async with self._lock:
            if self._question is None or self._stream is None:
                raise EnvInputError(
                    "step() before reset(): call reset() to get a question first", ErrorCode.SESSION_ERROR
                )
            self._step_count += 1
            self._episodes.total += 1
            question = self._question
            metadata: dict[str, Any] = {}
            try:
                score = await self._stream.score(question, action.answer)
            except EnvInputError as exc:
                score, metadata = 0.0, {"scoring_error": str(exc)}
        entry = question.entry
        return ReasoningGymObservation(
            question=None,
            score=score,
            correct_answer=str(entry["answer"]),
            dataset_metadata=entry.get("metadata") or None,
            reward=score,
            done=True,
            metadata=metadata,
        )

    @property
    def state(self) -> State:
        """Episode id and step count, plus the dataset being served."""
        stream = self._stream
        if self._episode_id is None and self._question is not None:
            self._episode_id = str(uuid4())
        return State(
            episode_id=self._episode_id,
            step_count=self._step_count,
            dataset_name=stream.request.name if stream is not None else None,
            dataset_size=stream.request.size if stream is not None else None,
            next_index=stream.next_index if stream is not None else 0,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        """Name, description and version shown on ``/metadata``."""
        return METADATA

    def close(self) -> None:
        """Stop background work for this environment."""
        if self._stream is not None:
            self._stream.close()
