"""The environment's episode semantics and argument errors, in-process."""

import pytest
import reasoning_gym
from reasoning_gym_env import ReasoningGymAction
from reasoning_gym_env_server.environment import DEFAULT_DATASET, ReasoningGymEnvironment
from reasoning_gym_env_server.errors import EnvInputError, ErrorCode


def test_named_dataset_matches_reasoning_gym_and_scores_with_it() -> None:
    env = ReasoningGymEnvironment()
    expected = reasoning_gym.create_dataset("chain_sum", seed=11, size=4, min_terms=2, max_terms=3)
    obs = env.reset(dataset_name="chain_sum", dataset_config={"min_terms": 2, "max_terms": 3}, seed=11, size=4)
    assert obs.question == expected[0]["question"] and obs.done is False and obs.reward == 0.0

    right = env.step(ReasoningGymAction(answer=expected[0]["answer"]))
    assert (right.score, right.reward, right.done) == (1.0, 1.0, True)
    assert right.correct_answer == expected[0]["answer"]
    assert right.dataset_metadata == expected[0]["metadata"]

    wrong = env.step(ReasoningGymAction(answer="not a number"))
    assert wrong.score == expected.score_answer("not a number", expected[0]) == 0.0


def test_bare_reset_walks_the_dataset_and_wraps() -> None:
    env = ReasoningGymEnvironment()
    expected = reasoning_gym.create_dataset("leg_counting", seed=5, size=3)
    questions = [env.reset(dataset_name="leg_counting", seed=5, size=3).question]
    questions += [env.reset().question for _ in range(3)]
    assert questions == [expected[i]["question"] for i in (0, 1, 2, 0)]


def test_first_bare_reset_uses_the_documented_default() -> None:
    env = ReasoningGymEnvironment()
    expected = reasoning_gym.create_dataset(DEFAULT_DATASET["dataset_name"], seed=42, size=1000)
    assert env.reset().question == expected[0]["question"]
    assert env.state.dataset_name == "leg_counting" and env.state.dataset_size == 1000


def test_composite_dataset_uses_specs() -> None:
    env = ReasoningGymEnvironment()
    specs = [{"name": "chain_sum", "weight": 1}, {"name": "leg_counting", "weight": 2, "config": {}}]
    obs = env.reset(dataset_name="composite", dataset_specs=specs, seed=3, size=6)
    expected = reasoning_gym.create_dataset(
        "composite",
        seed=3,
        size=6,
        datasets=[reasoning_gym.composite.DatasetSpec(s["name"], s["weight"], s.get("config", {})) for s in specs],
    )
    assert obs.question == expected[0]["question"]
    result = env.step(ReasoningGymAction(answer=expected[0]["answer"]))
    assert result.score == 1.0
    assert result.dataset_metadata["source_dataset"] in {"chain_sum", "leg_counting"}


def test_state_counts_steps_and_keeps_episode_id() -> None:
    env = ReasoningGymEnvironment()
    env.reset(episode_id="ep-1")
    env.step(ReasoningGymAction(answer="1"))
    assert env.state.episode_id == "ep-1" and env.state.step_count == 1
    env.reset()
    assert env.state.episode_id != "ep-1" and env.state.step_count == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset_name": "no_such_dataset", "seed": 1, "size": 2}, "Unknown dataset 'no_such_dataset'"),
        ({"dataset_name": "chain_sum"}, "needs both 'seed' and 'size'"),
        ({"dataset_name": "chain_sum", "seed": 1}, "needs both 'seed' and 'size'"),
        ({"dataset_name": "chain_sum", "seed": -1, "size": 2}, "'seed' must be an integer >= 0"),
        ({"dataset_name": "chain_sum", "seed": 1, "size": 0}, "'size' must be an integer >= 1"),
        ({"dataset_name": "chain_sum", "seed": 1, "size": 2, "dataset_config": {"bogus": 1}}, "Invalid dataset_config"),
        ({"dataset_name": "chain_sum", "seed": 1, "size": 2, "dataset_config": {"min_terms": 5, "max_terms": 2}},
         "Invalid dataset_config"),
        ({"dataset_name": "chain_sum", "seed": 1, "size": 2, "dataset_config": [1]}, "'dataset_config' must be an object"),
        ({"dataset_name": "composite", "seed": 1, "size": 2}, "non-empty list 'dataset_specs'"),
        ({"dataset_name": "composite", "seed": 1, "size": 2, "dataset_specs": [{"name": "nope"}]}, "unknown dataset 'nope'"),
        ({"dataset_name": "composite", "seed": 1, "size": 2, "dataset_specs": [{"name": "chain_sum", "weight": 0}]},
         "weight must be a positive number"),
        ({"size": 3}, "need 'dataset_name'"),
        ({"datasetname": "chain_sum"}, "Unknown reset arguments ['datasetname']"),
    ],
)
def test_bad_reset_arguments_are_rejected_and_keep_the_current_dataset(kwargs: dict, message: str) -> None:
    env = ReasoningGymEnvironment()
    env.reset(dataset_name="chain_sum", seed=9, size=5)
    with pytest.raises(EnvInputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        env.reset(**kwargs)
    expected = reasoning_gym.create_dataset("chain_sum", seed=9, size=5)
    assert env.reset().question == expected[1]["question"]


def test_step_before_reset_is_a_session_error() -> None:
    with pytest.raises(EnvInputError, match="before reset") as info:
        ReasoningGymEnvironment().step(ReasoningGymAction(answer="1"))
    assert info.value.code is ErrorCode.SESSION_ERROR
