"""The inline-scorer allow-list: each entry pinned to the code that was reviewed, and scoring exactly
as the dataset itself does, hostile answers included; long answers and other datasets go to a worker."""

import hashlib
import inspect
from collections.abc import Callable

import pytest
import reasoning_gym
from reasoning_gym import utils
from reasoning_gym.factory import DATASETS
from reasoning_gym_env import ReasoningGymAction, ReasoningGymReset
from reasoning_gym_env_server.pool import WorkerPool
from reasoning_gym_env_server.scoring import BOUNDED_SCORERS, INLINE_ANSWER_CHARS, inline_scorer, scorer_name

# sha256 (first 16 hex digits) of each allow-listed scorer's source followed by the sources of the
# reasoning-gym functions it calls, as read for the bound in scoring.py (reasoning-gym 0.1.24).
REVIEWED: dict[str, tuple[str, tuple[Callable, ...]]] = {
    "reasoning_gym.dataset.ProceduralDataset.score_answer": ("d4c377f0ac8e002f", ()),
    "reasoning_gym.arithmetic.chain_sum.ChainSumDataset.score_answer": (
        "7a6c6a0a13870d30",
        (utils.compute_decimal_reward,),
    ),
    "reasoning_gym.arithmetic.products.ProductsDataset.score_answer": (
        "7a6c6a0a13870d30",
        (utils.compute_decimal_reward,),
    ),
    "reasoning_gym.graphs.family_relationships.FamilyRelationshipsDataset.score_answer": ("1ce46396394d0885", ()),
    "reasoning_gym.cognition.color_cube_rotation.ColorCubeRotationDataset.score_answer": ("9ae94786f716e3b6", ()),
    "reasoning_gym.logic.circuit_logic.CircuitLogicDataset.score_answer": ("55d9642b99b8a29a", ()),
}

SCORERS = {scorer_name(cls.score_answer): cls.score_answer for cls, _ in DATASETS.values()}
INLINE_DATASETS = sorted(name for name in DATASETS if inline_scorer(name) is not None)

# Answers built to be slow, to raise, or to confuse a number parser; each at most INLINE_ANSWER_CHARS.
HOSTILE = [
    "",
    " ",
    "9**9**9**9",
    "1e999999999999999999",
    "1e-999999999999999999",
    "NaN",
    "sNaN",
    "-Infinity",
    "-0",
    "+01,000.00",
    "1_000",
    "\x00",
    "é" * 100,
    "9" * INLINE_ANSWER_CHARS,
    "1." + "0" * (INLINE_ANSWER_CHARS - 2),
    "1," * (INLINE_ANSWER_CHARS // 2),
    "0." + "0" * (INLINE_ANSWER_CHARS - 3) + "1",
    "[" * INLINE_ANSWER_CHARS,
]


def _digest(name: str) -> str:
    digest, callees = REVIEWED[name]
    source = inspect.getsource(SCORERS[name]) + "".join(inspect.getsource(f) for f in callees)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def test_every_allow_listed_scorer_was_reviewed() -> None:
    assert set(BOUNDED_SCORERS) == set(REVIEWED)


@pytest.mark.parametrize("name", sorted(REVIEWED))
def test_an_allow_listed_scorer_is_the_code_that_was_reviewed(name: str) -> None:
    assert name in SCORERS, f"{name} is no longer a reasoning-gym scorer"
    assert _digest(name) == REVIEWED[name][0], f"{name} changed: read it again before it runs in the event loop"


@pytest.mark.parametrize("dataset", INLINE_DATASETS)
def test_an_inline_scorer_scores_as_the_dataset_does(dataset: str) -> None:
    built = reasoning_gym.create_dataset(dataset, seed=3, size=3)
    score = inline_scorer(dataset)
    for entry in built:
        oracle = str(entry["answer"])
        for answer in [oracle, f" {oracle} ", oracle.upper(), f"x{oracle}x", *HOSTILE]:
            assert score(answer, entry) == built.score_answer(answer=answer, entry=entry), (dataset, answer[:40])


@pytest.mark.parametrize("dataset", ["countdown", "puzzle24", "simple_integration", "n_queens", "composite", "nope"])
def test_scorers_that_parse_or_evaluate_are_not_inline(dataset: str) -> None:
    assert inline_scorer(dataset) is None


def test_chain_sum_is_inline_and_an_answer_over_the_cap_goes_to_a_worker(run, monkeypatch) -> None:
    worker_scored: list[str] = []
    worker_score = WorkerPool.score

    async def recording_score(pool: WorkerPool, request, entry: bytes, answer: str) -> float:
        worker_scored.append(answer)
        return await worker_score(pool, request, entry, answer)

    monkeypatch.setattr(WorkerPool, "score", recording_score)
    expected = reasoning_gym.create_dataset("chain_sum", seed=9, size=5)
    long_right = " " * INLINE_ANSWER_CHARS + expected[1]["answer"]

    async def scenario(env) -> list[float]:
        await env.reset(ReasoningGymReset(dataset_name="chain_sum", seed=9, size=5))
        short = (await env.step(ReasoningGymAction(answer=expected[0]["answer"]))).score
        await env.reset()
        long = (await env.step(ReasoningGymAction(answer=long_right))).score
        return [short, long]

    assert run(scenario) == [1.0, expected.score_answer(answer=long_right, entry=expected[1])]
    assert worker_scored == [long_right]
