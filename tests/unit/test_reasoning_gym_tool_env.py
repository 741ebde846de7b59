"""The reasoning-gym env as TRL's environment_factory makes it: which question sequence each
instance walks, and which training questions the held-out set must avoid."""

import pytest
import reasoning_gym
from trainer.config import ReasoningGymConfig
from trainer.config.question_plan import QuestionSequence, environment_instances, training_sequences
from trainer.envs.reasoning_gym import environment_factory
from trainer.evaluation import questions as held_out
from trainer.evaluation.generation import messages_for, turn_prefix
from trainer.evaluation.questions import held_out_questions

SHARED = ReasoningGymConfig(seed=42, question_seeds="shared", dataset_size=64)
PER_GROUP = ReasoningGymConfig(seed=42, dataset_size=64)
PER_ENVIRONMENT = ReasoningGymConfig(seed=42, question_seeds="per_environment", dataset_size=64)
# Batch 4, two accumulation steps: a generation batch of 8 completions, four groups of 2.
GRPO = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 2}


def seeds_made(settings: ReasoningGymConfig, count: int) -> list[int]:
    factory = environment_factory(settings, GRPO)  # TRL's probe instance is the first
    return [factory().sequence.seed for _ in range(count)]


def test_per_group_sequences_give_each_group_its_question_and_the_groups_different_ones() -> None:
    assert PER_GROUP.question_seeds == "per_group"  # the default
    assert seeds_made(PER_GROUP, 8) == [42, 42, 58, 58, 74, 74, 90, 90]  # 64 questions in 4 slices of 16
    assert training_sequences(PER_GROUP, GRPO) == [QuestionSequence(s, 16) for s in (42, 58, 74, 90)]


def test_shared_sequence_is_walked_in_lock_step() -> None:
    assert seeds_made(SHARED, 4) == [42, 42, 42, 42]
    assert training_sequences(SHARED, GRPO) == [QuestionSequence(42, 64)]


def test_per_environment_sequences_give_each_instance_its_own() -> None:
    assert seeds_made(PER_ENVIRONMENT, 4) == [42, 50, 58, 66]
    assert training_sequences(PER_ENVIRONMENT, GRPO) == [QuestionSequence(42 + 8 * k, 8) for k in range(8)]


def test_the_sequences_are_disjoint_slices_of_the_training_set() -> None:
    """reasoning-gym's own datasets: the slices of the per-group sequences share no question and
    together are the training set of the seed (datasets of consecutive seeds overlap, shifted by one)."""
    config = {"min_terms": 2, "max_terms": 3}

    def texts(seed: int, size: int) -> list[str]:
        return [e["question"] for e in reasoning_gym.create_dataset("chain_sum", seed=seed, size=size, **config)]

    slices = [texts(s.seed, s.size) for s in training_sequences(PER_GROUP, GRPO)]
    assert sum(slices, []) == texts(42, 64)
    assert texts(43, 4)[:3] == texts(42, 4)[1:]  # why the slices are seed + k * size, not seed + k


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
    trained = [QuestionSequence(42, 2), QuestionSequence(43, 2)]
    questions, skipped = held_out_questions(PER_ENVIRONMENT, 1042, 3, 5, training_sequences=trained)
    assert [q.text for q in questions] == ["x", "y", "z"]
    assert skipped == 2
    with pytest.raises(Exception, match="equals a training seed"):
        held_out_questions(PER_ENVIRONMENT, 43, 1, 5, training_sequences=trained)


def test_the_user_turn_is_the_prompt_the_prefix_and_the_question() -> None:
    assert messages_for(turn_prefix(SHARED), "Q?")[0]["content"] == SHARED.prompt + "\n\nQ?"
    walkthrough = ReasoningGymConfig(prompt="Rules.\n", question_prefix="")
    assert messages_for(turn_prefix(walkthrough), "Q?")[0]["content"] == "Rules.\nQ?"
