"""The reasoning-gym environment as TRL ``environment_factory`` sees it: ``reset`` and one ``answer`` tool.

Talks to the reasoning-gym env service only through its OpenEnv client (``reasoning_gym_env``).
The first ``reset`` of an instance sends the dataset, its config and the seed; later resets are
bare and move to the next question. TRL pools one instance per completion of a generation batch and
hands instance i the batch's i-th completion; a batch holds its GRPO groups one after another
(``num_generations`` completions each), and every instance is reset once per batch. So the question
sequence instance i walks decides which questions it answers (``question_seeds``):

- ``per_group``: one sequence per GRPO group: the completions of a group answer one question and the
  groups of a batch answer different ones;
- ``shared``: one sequence for every instance: the whole batch answers one question;
- ``per_environment``: one sequence per instance (the upstream walkthrough's seed per instance): every
  completion answers its own question, so a group compares answers to different questions.

The K sequences split the ``dataset_size`` training questions: sequence k is the dataset of seed
``seed + k * w`` and size ``w = dataset_size // K``. reasoning-gym draws entry j of a seed-s dataset
from ``Random(s + j)``, so these are consecutive, disjoint slices of the training set of ``seed``: no
two sequences share a question (datasets of consecutive seeds would, shifted by one entry).

The reward is the score the server computed.

If the service restarts, the instance reconnects and replays its resets to get back to the same
question; an answer lost to the restart gives reward ``None`` (TRL ignores the sample) instead of 0.
"""

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

from ..config import ReasoningGymConfig
from ..config.question_plan import QuestionSequence, question_sequences
from .errors import EnvUnavailable

log = logging.getLogger(__name__)


@dataclass
class AnswerRecord:
    """What one rollout asked and answered, and what the server said about it."""

    seed: int | None = None  # of the question sequence
    question: str | None = None
    question_index: int = -1
    answer: str | None = None
    score: float | None = None
    correct_answer: str | None = None
    dataset_metadata: dict[str, Any] | None = None
    error: str | None = None


class ReasoningGymToolEnv:
    """One pooled environment instance (TRL makes one per completion in a generation batch)."""

    def __init__(self, settings: ReasoningGymConfig, sequence: QuestionSequence | None = None) -> None:
        self._settings = settings
        self.sequence = QuestionSequence(settings.seed, settings.dataset_size) if sequence is None else sequence
        self._client: Any = None
        self._resets = 0  # questions served so far: what a reconnect replays
        self.record = AnswerRecord()

    def _connect(self) -> Any:
        s = self._settings
        client = ReasoningGymEnv(
            base_url=s.env_url, connect_timeout_s=s.connect_timeout_s, message_timeout_s=s.message_timeout_s
        ).sync()
        client.connect()
        return client

    def _disconnect(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # the socket is already gone
                pass
            self._client = None

    def _reset_to(self, count: int) -> Any:
        """Set up the dataset on a new session and move it to the ``count``-th question (1-based)."""
        s = self._settings
        result = self._client.reset(
            dataset_name=s.dataset,
            dataset_config=s.dataset_config,
            seed=self.sequence.seed,
            size=self.sequence.size,
        )
        for _ in range(count - 1):
            result = self._client.reset()
        return result

    def _with_reconnect(self, call: str, fn: Callable[[bool], Any]) -> Any:
        """Run ``fn(fresh)``; on a broken connection reconnect and run it again with ``fresh=True``."""
        error: Exception = EnvUnavailable("no attempt made")
        for attempt in range(self._settings.reconnect_attempts):
            fresh = self._client is None
            try:
                if fresh:
                    self._client = self._connect()
                return fn(fresh)
            except EnvUnavailable:
                raise
            except RuntimeError as exc:
                if str(exc).startswith("Server error"):
                    raise  # the server answered: bad input, not a broken connection
                error = exc
            except Exception as exc:  # connection refused/closed, timeouts
                error = exc
            log.warning(
                "reasoning-gym env %s failed (%s: %s); reconnecting (%d/%d)",
                call,
                type(error).__name__,
                error,
                attempt + 1,
                self._settings.reconnect_attempts,
            )
            self._disconnect()
            time.sleep(min(2.0**attempt, 10.0))
        raise EnvUnavailable(f"reasoning-gym env at {self._settings.env_url} unreachable: {error}")

    def reset(self, **row: Any) -> str:
        """Start the next episode; ``question_prefix`` and the question are appended to the prompt."""
        self.record = AnswerRecord(seed=self.sequence.seed)
        target = self._resets + 1
        result = self._with_reconnect("reset", lambda fresh: self._reset_to(target) if fresh else self._client.reset())
        self._resets = target
        self.record.question = result.observation.question
        self.record.question_index = target - 1
        return self._settings.question_prefix + result.observation.question

    def answer(self, answer: str) -> str:
        """Submit the final answer to the current problem.

        Args:
            answer: The final answer, exactly as it should be graded (for example "42").

        Returns:
            Whether the answer was correct.
        """
        if self.record.answer is not None:
            return "You already answered this problem; the episode is over."
        self.record.answer = answer

        def step(fresh: bool) -> Any:
            if fresh:  # a new session has no open question: back to where we were, the answer is lost
                self._reset_to(self._resets)
                raise EnvUnavailable("the env service restarted between question and answer")
            return self._client.step(ReasoningGymAction(answer=str(answer)))

        try:
            result = self._with_reconnect("step", step)
        except EnvUnavailable as exc:
            self.record.error = str(exc)
            raise
        obs = result.observation
        self.record.score = float(result.reward if result.reward is not None else obs.score or 0.0)
        self.record.correct_answer = obs.correct_answer
        self.record.dataset_metadata = obs.dataset_metadata
        return "correct" if self.record.score >= 1.0 else f"incorrect (score {self.record.score:g})"

    def _reward(self) -> float | None:
        """The server's score; 0 when the model never answered; None when the env failed."""
        if self.record.error is not None:
            return None
        return self.record.score if self.record.score is not None else 0.0


# TRL GRPOConfig's defaults of the fields that size a generation batch.
class SeededInstances:
    """``environment_factory``: the i-th instance TRL makes (its probe instance first, which is also
    the first of its pool) walks the i-th of ``question_sequences``."""

    def __init__(self, settings: ReasoningGymConfig, grpo: dict[str, Any]) -> None:
        self.settings = settings
        self.sequences = question_sequences(settings, grpo)
        self._made = itertools.count()

    def __call__(self) -> ReasoningGymToolEnv:
        return ReasoningGymToolEnv(self.settings, self.sequences[next(self._made) % len(self.sequences)])


def environment_factory(settings: ReasoningGymConfig, grpo: dict[str, Any]) -> Callable[[], ReasoningGymToolEnv]:
    """What TRL's ``environment_factory`` gets for these settings and this GRPO section."""
    return SeededInstances(settings, grpo)
