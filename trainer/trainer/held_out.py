"""Held-out reasoning-gym questions (disjoint from the training questions), scored by the env
server, and the statistics of a held-out evaluation."""

import contextlib
import hashlib
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

from .config import ConfigError
from .reasoning_gym_tools import EnvUnavailable, ReasoningGymSettings

Z95 = 1.959963984540054
PRETRAINING_MANIFEST = "rlstack_pretraining.json"  # written into a model folder by ``trainer.pretrain``


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


def _session(settings: ReasoningGymSettings) -> Any:
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


def _walk(settings: ReasoningGymSettings, seed: int, size: int, count: int) -> Iterator[str]:
    """The first ``count`` questions of the dataset ``(settings.dataset, seed, size)``, in order, as
    they are read (stop early and the session closes)."""
    with _session(settings) as env:
        yield env.reset(
            dataset_name=settings.dataset, dataset_config=settings.dataset_config, seed=seed, size=size
        ).observation.question
        for _ in range(count - 1):
            yield env.reset().observation.question


def labelled_questions(settings: ReasoningGymSettings, seed: int, count: int) -> list[tuple[str, str]]:
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
    training: ReasoningGymSettings,
    training_questions: int,
    seed: int,
    count: int,
    pool: int,
    excluded: frozenset[str] = frozenset(),
) -> tuple[list[Question], int]:
    """``count`` questions of the held-out ``seed`` whose text is none of the first
    ``training_questions`` questions the training run draws and whose sha256 is not in ``excluded``
    (the policy's pre-training questions); (questions, how many were skipped).

    Raises ``ConfigError`` when the seeds are equal or the dataset has too few distinct questions.
    """
    if seed == training.seed:
        raise ConfigError(
            f"eval.seed ({seed}) equals the training seed: held-out questions must come from another seed"
        )
    seen = set(_walk(training, training.seed, training.dataset_size, training_questions))
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
            f"{training_questions} training questions and the {len(excluded)} pre-training questions "
            f"(asked for {count}): the dataset has too few "
            "distinct questions; lower eval.num_questions or reasoning_gym.dataset_size, or widen "
            "dataset_config"
        )
    return questions, skipped


def score_answers(
    training: ReasoningGymSettings,
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


def proportion_ci(successes: int, n: int) -> tuple[float, float]:
    """Wilson score interval (95%) of a proportion."""
    if n == 0:
        return 0.0, 0.0
    p = successes / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): normal 95% interval of a mean."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, mean - Z95 * sd / math.sqrt(n), mean + Z95 * sd / math.sqrt(n)


def summary_of(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy (Wilson 95% CI) and mean score (normal 95% CI) of scored records."""
    correct = sum(r["correct"] for r in records)
    low, high = proportion_ci(correct, len(records))
    score, score_low, score_high = mean_ci([r["score"] for r in records])
    return {
        "questions": len(records),
        "accuracy": correct / len(records) if records else 0.0,
        "accuracy_ci": [low, high],
        "mean_score": score,
        "mean_score_ci": [score_low, score_high],
        "answered": sum(r["answer"] is not None for r in records),
    }


def paired_difference(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> dict[str, float]:
    """After minus before on the same questions: accuracy points and their 95% CI (paired)."""
    if [r["index"] for r in before] != [r["index"] for r in after]:
        raise ValueError("before and after were not evaluated on the same questions")
    mean, low, high = mean_ci([float(a["correct"]) - float(b["correct"]) for b, a in zip(before, after)])
    return {"points": 100 * mean, "ci_low": 100 * low, "ci_high": 100 * high}


def before_after_line(label: str, n: int, before: float, after: float, diff: dict[str, float]) -> str:
    """``held-out accuracy (T=1.0, 200 questions): 31.0% -> 58.5% (+27.5 pts, 95% CI +19.8..+35.1)``."""
    return (
        f"held-out accuracy ({label}, {n} questions): {100 * before:.1f}% -> {100 * after:.1f}% "
        f"({diff['points']:+.1f} pts, 95% CI {diff['ci_low']:+.1f}..{diff['ci_high']:+.1f})"
    )


Generate = Callable[[Sequence[str], float], list[str | None]]
