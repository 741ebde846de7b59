"""Held-out reasoning-gym questions (disjoint from the training and pre-training questions), and
their answers scored by the env server."""

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

from ..config import ConfigError, ReasoningGymConfig
from ..config.question_plan import QuestionSequence
from ..envs.errors import EnvUnavailable

PRETRAINING_MANIFEST = "rlstack_pretraining.json"  # written into a model folder by ``trainer.jobs.pretrain``


@dataclass(frozen=True)
class Question:
    """One held-out question: its position in the held-out seed's dataset and its text."""

    index: int
    text: str


def question_digest(text: str) -> str:
    """How a question is recorded where its text is not kept (a policy's pre-training questions)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pretraining_digests(model_dir: str) -> frozenset[str]:
    """The digests of the questions ``model_dir`` was pre-trained on (empty for any other model)."""
    path = Path(model_dir) / PRETRAINING_MANIFEST
    if not path.is_file():
        return frozenset()
    return frozenset(json.loads(path.read_text())["question_sha256"])


def _session(settings: ReasoningGymConfig) -> Any:
    """A connected session of the env service, or ``EnvUnavailable`` saying where it was looked for."""
    env = ReasoningGymEnv(
        base_url=settings.env_url,
        connect_timeout_s=settings.connect_timeout_s,
        message_timeout_s=settings.message_timeout_s,
    ).sync()
    try:
        env.connect()
    except Exception as exc:  # refused, unresolvable, timed out
        raise EnvUnavailable(
            f"reasoning-gym env at {settings.env_url} unreachable: {type(exc).__name__}: {exc}"
        ) from None
    return env


def _walk(settings: ReasoningGymConfig, seed: int, size: int, count: int) -> Iterator[str]:
    """The first ``count`` questions of the dataset ``(settings.dataset, seed, size)``, in order, as
    they are read (stop early and the session closes)."""
    with _session(settings) as env:
        yield env.reset(
            dataset_name=settings.dataset, dataset_config=settings.dataset_config, seed=seed, size=size
        ).observation.question
        for _ in range(count - 1):
            yield env.reset().observation.question


def labelled_questions(settings: ReasoningGymConfig, seed: int, count: int) -> list[tuple[str, str]]:
    """The first ``count`` questions of the dataset ``(settings.dataset, seed, count)`` with the correct
    answer the server reveals once a question is answered (pre-training data)."""
    examples = []
    with _session(settings) as env:
        result = env.reset(dataset_name=settings.dataset, dataset_config=settings.dataset_config, seed=seed, size=count)
        for index in range(count):
            if index:
                result = env.reset()
            answer = env.step(ReasoningGymAction(answer="")).observation.correct_answer
            if answer is None:
                raise RuntimeError(
                    f"the env server revealed no correct answer for question {index} of {settings.dataset}"
                )
            examples.append((result.observation.question, str(answer)))
    return examples


def held_out_questions(
    training: ReasoningGymConfig,
    seed: int,
    count: int,
    pool: int,
    excluded: frozenset[str] = frozenset(),
    training_sequences: Sequence[QuestionSequence] | None = None,
) -> tuple[list[Question], int]:
    """``count`` questions of the held-out ``seed`` whose text is no question of any sequence the
    training run walks (``training_sequences``, default the training seed's ``dataset_size``
    questions) and whose sha256 is not in ``excluded`` (the policy's pre-training questions);
    (questions, how many were skipped).

    Raises ``ConfigError`` when the held-out seed is a training sequence's seed or the dataset has too
    few distinct questions.
    """
    sequences = (
        [QuestionSequence(training.seed, training.dataset_size)] if training_sequences is None else training_sequences
    )
    if seed in {s.seed for s in sequences}:
        raise ConfigError(f"eval.seed ({seed}) equals a training seed: held-out questions must come from another seed")
    seen = {text for s in sequences for text in _walk(training, s.seed, s.size, s.size)}
    questions, skipped = [], 0
    with contextlib.closing(_walk(training, seed, pool, pool)) as candidates:  # read only as far as needed
        for index, text in enumerate(candidates):
            if text in seen or question_digest(text) in excluded:
                skipped += 1
                continue
            questions.append(Question(index, text))
            if len(questions) == count:
                break
    if len(questions) < count:
        raise ConfigError(
            f"only {len(questions)} of {pool} held-out questions of {training.dataset} differ from the "
            f"{len(seen)} training questions and the {len(excluded)} pre-training questions "
            f"(asked for {count}): the dataset has too few "
            "distinct questions; lower eval.num_questions or reasoning_gym.dataset_size, or widen "
            "dataset_config"
        )
    return questions, skipped


def score_answers(
    training: ReasoningGymConfig,
    seed: int,
    pool: int,
    questions: Sequence[Question],
    answers: Sequence[str | None],
) -> list[dict[str, Any]]:
    """The server's score of each answer (``None``: no answer, scored 0) on a fresh walk of the
    held-out dataset; one record per question."""
    wanted = {q.index: (q, a) for q, a in zip(questions, answers)}
    records = []
    with _session(training) as env:
        result = env.reset(dataset_name=training.dataset, dataset_config=training.dataset_config, seed=seed, size=pool)
        for index in range(max(wanted) + 1):
            if index:
                result = env.reset()
            if index not in wanted:
                continue
            question, answer = wanted[index]
            if result.observation.question != question.text:
                raise RuntimeError(
                    f"held-out question {index} changed between walks: the env server's dataset is not deterministic"
                )
            step = env.step(ReasoningGymAction(answer=answer if answer is not None else ""))
            score = float(step.reward if step.reward is not None else step.observation.score or 0.0)
            records.append(
                {
                    "index": index,
                    "question": question.text,
                    "answer": answer,
                    "score": score if answer is not None else 0.0,
                    "correct": answer is not None and score >= 1.0,
                    "correct_answer": step.observation.correct_answer,
                }
            )
    return records


Generate = Callable[[Sequence[str], float], list[str | None]]
