"""Which questions each env instance of a GRPO run walks: derived once from the config (the
``reasoning_gym`` section and the GRPO batch shape), read by the env factory (what each instance
asks) and by the held-out evaluation (what it must exclude)."""

from dataclasses import dataclass
from typing import Any

from .schema import ReasoningGymConfig


@dataclass(frozen=True)
class QuestionSequence:
    """The questions one env instance walks: the reasoning-gym dataset of this seed and size, in order."""

    seed: int
    size: int


TRL_DEFAULT_BATCH_SIZE = 8
TRL_DEFAULT_ACCUMULATION = 1
TRL_DEFAULT_NUM_GENERATIONS = 8


def num_generations(grpo: dict[str, Any]) -> int:
    """Completions per GRPO group for a GRPO section."""
    return grpo.get("num_generations", TRL_DEFAULT_NUM_GENERATIONS)


def environment_instances(grpo: dict[str, Any]) -> int:
    """How many env instances TRL makes for a GRPO section: one per completion of a generation batch
    on one process, ``per_device_train_batch_size x steps_per_generation`` (the job checks it
    against TRL's own ``GRPOConfig`` at start)."""
    accumulation = grpo.get("gradient_accumulation_steps", TRL_DEFAULT_ACCUMULATION)
    return grpo.get("per_device_train_batch_size", TRL_DEFAULT_BATCH_SIZE) * (
        grpo.get("steps_per_generation") or accumulation
    )


def question_sequences(settings: ReasoningGymConfig, grpo: dict[str, Any]) -> list[QuestionSequence]:
    """The sequence of each env instance TRL makes for this GRPO section, by instance index."""
    instances = environment_instances(grpo)
    if settings.question_seeds == "per_group":
        keys = [i // num_generations(grpo) for i in range(instances)]
    elif settings.question_seeds == "per_environment":
        keys = list(range(instances))
    else:
        keys = [0] * instances
    size = max(1, settings.dataset_size // (max(keys) + 1))
    return [QuestionSequence(settings.seed + k * size, size) for k in keys]


def training_sequences(settings: ReasoningGymConfig, grpo: dict[str, Any]) -> list[QuestionSequence]:
    """Every distinct question sequence a training run with this GRPO section walks."""
    return sorted(set(question_sequences(settings, grpo)), key=lambda q: q.seed)
