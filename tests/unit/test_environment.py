"""The environment's episode semantics and argument errors, in-process (dataset code in workers)."""

import pytest
import reasoning_gym
from reasoning_gym_env import ReasoningGymAction, ReasoningGymReset
from reasoning_gym_env_server.environment import ReasoningGymEnvironment
from reasoning_gym_env_server.errors import EnvInputError, ErrorCode


def test_named_dataset_matches_reasoning_gym_and_scores_with_it(run) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=11, size=4, min_terms=2, max_terms=3)

    async def scenario(env: ReasoningGymEnvironment) -> None:
        obs = await env.reset(
            ReasoningGymReset(
                dataset_name="chain_sum", dataset_config={"min_terms": 2, "max_terms": 3}, seed=11, size=4
            )
        )
        assert obs.question == expected[0]["question"]
        assert obs.done is False
        assert obs.reward == 0.0
        right = await env.step(ReasoningGymAction(answer=expected[0]["answer"]))
        assert (right.score, right.reward, right.done) == (1.0, 1.0, True)
        assert right.correct_answer == expected[0]["answer"]
        assert right.dataset_metadata == expected[0]["metadata"]
        wrong = await env.step(ReasoningGymAction(answer="not a number"))
        assert wrong.score == expected.score_answer("not a number", expected[0]) == 0.0

    run(scenario)


def test_bare_reset_walks_the_dataset_and_wraps(run) -> None:
    expected = reasoning_gym.create_dataset("leg_counting", seed=5, size=3)

    async def scenario(env: ReasoningGymEnvironment) -> list[str]:
        questions = [(await env.reset(ReasoningGymReset(dataset_name="leg_counting", seed=5, size=3))).question]
        return questions + [(await env.reset()).question for _ in range(3)]

    assert run(scenario) == [expected[i]["question"] for i in (0, 1, 2, 0)]


def test_long_walk_crosses_prefetched_batches_in_order(run) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=2, size=150)

    async def scenario(env: ReasoningGymEnvironment) -> list[str]:
        questions = [(await env.reset(ReasoningGymReset(dataset_name="chain_sum", seed=2, size=150))).question]
        for _ in range(200):
            questions.append((await env.reset()).question)
        return questions

    assert run(scenario) == [expected[i % 150]["question"] for i in range(201)]


def test_first_bare_reset_uses_the_documented_default(run) -> None:
    expected = reasoning_gym.create_dataset("leg_counting", seed=42, size=1000)

    async def scenario(env: ReasoningGymEnvironment) -> None:
        assert (await env.reset()).question == expected[0]["question"]
        assert env.state.dataset_name == "leg_counting"
        assert env.state.dataset_size == 1000
        assert env.state.next_index == 1

    run(scenario)


def test_composite_dataset_uses_specs(run) -> None:
    specs = [{"name": "chain_sum", "weight": 1}, {"name": "leg_counting", "weight": 2, "config": {}}]
    expected = reasoning_gym.create_dataset(
        "composite",
        seed=3,
        size=6,
        datasets=[reasoning_gym.composite.DatasetSpec(s["name"], s["weight"], s.get("config", {})) for s in specs],
    )

    async def scenario(env: ReasoningGymEnvironment) -> None:
        obs = await env.reset(ReasoningGymReset(dataset_name="composite", dataset_specs=specs, seed=3, size=6))
        assert obs.question == expected[0]["question"]
        result = await env.step(ReasoningGymAction(answer=expected[0]["answer"]))
        assert result.score == 1.0
        assert result.dataset_metadata["source_dataset"] in {"chain_sum", "leg_counting"}

    run(scenario)


def test_state_counts_steps_and_keeps_episode_id(run) -> None:
    async def scenario(env: ReasoningGymEnvironment) -> None:
        await env.reset(ReasoningGymReset(episode_id="ep-1"))
        await env.step(ReasoningGymAction(answer="1"))
        assert env.state.episode_id == "ep-1"
        assert env.state.step_count == 1
        await env.reset()
        assert env.state.episode_id != "ep-1"
        assert env.state.step_count == 0

    run(scenario)


CHAIN = {"dataset_name": "chain_sum", "seed": 1, "size": 2}


@pytest.mark.parametrize(
    ("kwargs", "message", "code"),
    [
        (
            {"dataset_name": "no_such_dataset", "seed": 1, "size": 2},
            "Unknown dataset 'no_such_dataset'",
            "VALIDATION_ERROR",
        ),
        ({"dataset_name": "chain_sum"}, "needs both 'seed' and 'size'", "VALIDATION_ERROR"),
        ({"dataset_name": "chain_sum", "seed": 1}, "needs both 'seed' and 'size'", "VALIDATION_ERROR"),
        ({"dataset_name": "chain_sum", "seed": -1, "size": 2}, "'seed' must be an integer from 0", "VALIDATION_ERROR"),
        (
            {"dataset_name": "chain_sum", "seed": 1, "size": 0},
            "'size' must be an integer from 1 to 10000",
            "VALIDATION_ERROR",
        ),
        (
            {"dataset_name": "chain_sum", "seed": 1, "size": 10_001},
            "'size' must be an integer from 1 to 10000",
            "VALIDATION_ERROR",
        ),
        ({**CHAIN, "dataset_config": {"bogus": 1}}, "Invalid dataset_config", "VALIDATION_ERROR"),
        ({**CHAIN, "dataset_config": {"min_terms": 5, "max_terms": 2}}, "Invalid dataset_config", "VALIDATION_ERROR"),
        ({**CHAIN, "dataset_config": {"max_terms": 2**60}}, "beyond", "VALIDATION_ERROR"),
        ({**CHAIN, "dataset_config": {"max_terms": float("inf")}}, "not finite", "VALIDATION_ERROR"),
        ({**CHAIN, "dataset_config": {"a": [[[[[[[[[1]]]]]]]]]}}, "nested deeper", "VALIDATION_ERROR"),
        ({**CHAIN, "dataset_config": {"a": list(range(20_000))}}, "more than 10000 values", "VALIDATION_ERROR"),
        ({**CHAIN, "dataset_config": {"a": "x" * 20_000}}, "string longer", "VALIDATION_ERROR"),
        ({"dataset_name": "composite", "seed": 1, "size": 2}, "non-empty list 'dataset_specs'", "VALIDATION_ERROR"),
        (
            {"dataset_name": "composite", "seed": 1, "size": 2, "dataset_specs": [{"name": "nope"}]},
            "unknown dataset 'nope'",
            "VALIDATION_ERROR",
        ),
        (
            {"dataset_name": "composite", "seed": 1, "size": 2, "dataset_specs": [{"name": "chain_sum", "weight": 0}]},
            "weight must be a positive number",
            "VALIDATION_ERROR",
        ),
        ({"size": 3}, "need 'dataset_name'", "VALIDATION_ERROR"),
        # Accepted by reasoning-gym's validate(), then it raises IndexError generating the first question.
        (
            {
                "dataset_name": "spell_backward",
                "seed": 1,
                "size": 2,
                "dataset_config": {"min_word_len": 100, "max_word_len": 200},
            },
            "reasoning-gym failed",
            "DATASET_ERROR",
        ),
        # A sieve up to 2e8 needs more than the worker's memory bound.
        (
            {"dataset_name": "count_primes", "seed": 1, "size": 2, "dataset_config": {"max_n": 200_000_000}},
            "memory bound",
            "DATASET_TOO_COSTLY",
        ),
    ],
)
def test_bad_reset_arguments_are_rejected_and_keep_the_current_dataset(
    run, kwargs: dict, message: str, code: str
) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=9, size=5)

    async def scenario(env: ReasoningGymEnvironment) -> None:
        await env.reset(ReasoningGymReset(dataset_name="chain_sum", seed=9, size=5))
        with pytest.raises(EnvInputError, match=message.replace("[", r"\[").replace("]", r"\]")) as info:
            await env.reset(ReasoningGymReset(**kwargs))
        assert info.value.code.value == code
        assert env.state.dataset_name == "chain_sum"
        assert env.state.next_index == 1
        assert (await env.reset()).question == expected[1]["question"]

    run(scenario)


def test_step_before_reset_is_a_session_error(run) -> None:
    async def scenario(env: ReasoningGymEnvironment) -> None:
        with pytest.raises(EnvInputError, match="before reset") as info:
            await env.step(ReasoningGymAction(answer="1"))
        assert info.value.code is ErrorCode.SESSION_ERROR

    run(scenario)


@pytest.mark.parametrize("dataset", ["countdown", "puzzle24", "simple_integration"])
def test_an_answer_that_never_finishes_scoring_scores_zero_and_the_session_continues(run, dataset: str) -> None:
    """These scorers evaluate the answer (sympy / eval): ``9**9**9**9`` would run forever."""
    expected = reasoning_gym.create_dataset(dataset, seed=1, size=3)

    async def scenario(env: ReasoningGymEnvironment) -> None:
        await env.reset(ReasoningGymReset(dataset_name=dataset, seed=1, size=3))
        result = await env.step(ReasoningGymAction(answer="9**9**9**9"))
        assert (result.score, result.reward, result.done) == (0.0, 0.0, True)
        assert "DATASET_BUILD_TIMEOUT_S" in result.metadata["scoring_error"]
        assert (await env.reset()).question == expected[1]["question"]
        right = await env.step(ReasoningGymAction(answer=expected[1]["answer"]))
        assert right.score == expected.score_answer(expected[1]["answer"], expected[1])

    run(scenario)
