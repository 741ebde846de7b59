"""The reasoning-gym env as TRL's environment_factory makes it: which question sequence each
instance walks, and which training questions the held-out set must avoid."""

import pytest
from trainer.config import ReasoningGymConfig
from trainer.envs.reasoning_gym import environment_factory, environment_instances, training_seeds
from trainer.evaluation import questions as held_out
from trainer.evaluation.generation import messages_for, turn_prefix
from trainer.evaluation.questions import held_out_questions

SHARED = ReasoningGymConfig(seed=42, question_seeds="shared")
PER_GROUP = ReasoningGymConfig(seed=42)
PER_ENVIRONMENT = ReasoningGymConfig(seed=42, question_seeds="per_environment")
# Batch 4, two accumulation steps: a generation batch of 8 completions, four groups of 2.
GRPO = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 2}


def seeds_made(settings: ReasoningGymConfig, count: int) -> list[int]:
    factory = environment_factory(settings, GRPO["num_generations"])  # TRL's probe instance is the first
    return [factory().seed for _ in range(count)]


def test_per_group_seeds_give_each_group_its_question_and_the_groups_different_ones() -> None:
    assert PER_GROUP.question_seeds == "per_group"  # the default
    assert seeds_made(PER_GROUP, 8) == [42, 42, 43, 43, 44, 44, 45, 45]
    assert training_seeds(PER_GROUP, GRPO) == [42, 43, 44, 45]


def test_shared_seeds_walk_one_sequence_in_lock_step() -> None:
    assert seeds_made(SHARED, 4) == [42, 42, 42, 42]
    assert training_seeds(SHARED, GRPO) == [42]


def test_per_environment_seeds_give_each_instance_its_own_sequence() -> None:
    assert seeds_made(PER_ENVIRONMENT, 4) == [42, 43, 44, 45]
    assert training_seeds(PER_ENVIRONMENT, GRPO) == list(range(42, 50))


@pytest.mark.parametrize(
    ("grpo", "instances"),
    [
        ({}, 8),  # TRL's defaults: batch 8, one accumulation step
        ({"per_device_train_batch_size": 1, "gradient_accumulation_steps": 4}, 4),  # the walkthrough
        ({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 16, "steps_per_generation": 4}, 8),
    ],
)
def test_env_instances_per_generation_batch(grpo: dict, instances: int) -> None:
    assert environment_instances(grpo) == instances


def test_the_held_out_set_avoids_every_training_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    sequences = {42: ["a", "b"], 43: ["c", "d"], 1042: ["a", "x", "d", "y", "z"]}

    def walk(settings, seed, size, count):  # a generator, as the real walk (closed when read far enough)
        yield from sequences[seed][:count]

    monkeypatch.setattr(held_out, "_walk", walk)
    questions, skipped = held_out_questions(PER_ENVIRONMENT, 2, 1042, 3, 5, training_seeds=[42, 43])
    assert [q.text for q in questions] == ["x", "y", "z"]
    assert skipped == 2
    with pytest.raises(Exception, match="equals a training seed"):
        held_out_questions(PER_ENVIRONMENT, 2, 43, 1, 5, training_seeds=[42, 43])


def test_the_user_turn_is_the_prompt_the_prefix_and_the_question() -> None:
    assert messages_for(turn_prefix(SHARED), "Q?")[0]["content"] == SHARED.prompt + "\n\nQ?"
    walkthrough = ReasoningGymConfig(prompt="Rules.\n", question_prefix="")
    assert messages_for(turn_prefix(walkthrough), "Q?")[0]["content"] == "Rules.\nQ?"
