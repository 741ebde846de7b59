"""The reasoning-gym environment: one question per episode, scored by the dataset itself."""

from typing import Any, Optional
from uuid import uuid4

import reasoning_gym
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata, State
from reasoning_gym.composite import DatasetSpec
from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS
from reasoning_gym_env import ReasoningGymAction, ReasoningGymObservation

from .errors import EnvInputError, ErrorCode

# Used by a bare reset() when no dataset was built yet (same default as upstream).
DEFAULT_DATASET = {"dataset_name": "leg_counting", "seed": 42, "size": 1000}

RESET_ARGUMENTS = ("dataset_name", "dataset_config", "dataset_specs", "seed", "size", "episode_id")


def dataset_names() -> list[str]:
    """Names accepted by ``reset(dataset_name=...)``."""
    return sorted(DATASETS)


def _require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EnvInputError(f"'{name}' must be an integer >= {minimum}, got {value!r}")
    return value


def _composite_specs(specs: Any) -> list[DatasetSpec]:
    if not isinstance(specs, list) or not specs:
        raise EnvInputError("dataset_name 'composite' needs a non-empty list 'dataset_specs' of {name, weight, config}")
    parsed = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise EnvInputError(f"dataset_specs[{i}] must be an object with a string 'name', got {spec!r}")
        unknown = set(spec) - {"name", "weight", "config"}
        if unknown:
            raise EnvInputError(f"dataset_specs[{i}] has unknown keys {sorted(unknown)}; allowed: name, weight, config")
        if spec["name"] not in DATASETS:
            raise EnvInputError(f"dataset_specs[{i}]: unknown dataset '{spec['name']}' (GET /datasets lists them)")
        config = spec.get("config") or {}
        if not isinstance(config, dict):
            raise EnvInputError(f"dataset_specs[{i}].config must be an object, got {config!r}")
        weight = spec.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            raise EnvInputError(f"dataset_specs[{i}].weight must be a positive number, got {weight!r}")
        parsed.append(DatasetSpec(name=spec["name"], weight=float(weight), config=config))
    return parsed


def build_dataset(
    dataset_name: str, seed: Any, size: Any, dataset_config: Any = None, dataset_specs: Any = None
) -> ProceduralDataset:
    """Build a reasoning-gym dataset exactly as upstream's server does, with clear errors."""
    if not isinstance(dataset_name, str):
        raise EnvInputError(f"'dataset_name' must be a string, got {dataset_name!r}")
    if seed is None or size is None:
        raise EnvInputError(f"dataset_name '{dataset_name}' needs both 'seed' and 'size'")
    seed = _require_int("seed", seed, 0)
    size = _require_int("size", size, 1)
    if dataset_config is not None and not isinstance(dataset_config, dict):
        raise EnvInputError(f"'dataset_config' must be an object, got {dataset_config!r}")
    if dataset_name == "composite":
        kwargs: dict[str, Any] = {"datasets": _composite_specs(dataset_specs)}
    elif dataset_name not in DATASETS:
        raise EnvInputError(f"Unknown dataset '{dataset_name}' ({len(DATASETS)} available; GET /datasets lists them)")
    else:
        kwargs = dict(dataset_config or {})
    try:
        return reasoning_gym.create_dataset(dataset_name, seed=seed, size=size, **kwargs)
    except (TypeError, ValueError, AssertionError, KeyError) as exc:
        detail = str(exc) or type(exc).__name__
        raise EnvInputError(f"Invalid dataset_config for '{dataset_name}': {detail}") from exc


class ReasoningGymEnvironment(Environment[ReasoningGymAction, ReasoningGymObservation, State]):
    """Single-step episodes over a reasoning-gym dataset.

    ``reset(dataset_name, dataset_config, seed, size)`` builds a dataset and returns its first
    question; ``reset()`` returns the next question (wrapping around), building
    ``DEFAULT_DATASET`` first if needed; ``step(action)`` scores the answer with the dataset's own
    ``score_answer`` and ends the episode (reward = score).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._dataset: Optional[ProceduralDataset] = None
        self._dataset_name: Optional[str] = None
        self._next_index = 0
        self._entry: Optional[dict[str, Any]] = None
        self._episode_id: Optional[str] = None
        self._step_count = 0

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        dataset_name: Optional[str] = None,
        dataset_config: Optional[dict] = None,
        dataset_specs: Optional[list] = None,
        size: Optional[int] = None,
        **unknown: Any,
    ) -> ReasoningGymObservation:
        """Start an episode; see the class docstring for the argument rules."""
        if unknown:
            raise EnvInputError(f"Unknown reset arguments {sorted(unknown)}; accepted: {', '.join(RESET_ARGUMENTS)}")
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
            raise EnvInputError("'episode_id' must be a string of at most 255 characters")
        if dataset_name is not None:
            self._dataset = build_dataset(dataset_name, seed, size, dataset_config, dataset_specs)
            self._dataset_name, self._next_index = dataset_name, 0
        elif dataset_config is not None or dataset_specs is not None or size is not None:
            raise EnvInputError("'dataset_config', 'dataset_specs' and 'size' need 'dataset_name'")
        elif self._dataset is None:
            self._dataset = build_dataset(**DEFAULT_DATASET)
            self._dataset_name, self._next_index = DEFAULT_DATASET["dataset_name"], 0

        self._entry = self._dataset[self._next_index]
        self._next_index = (self._next_index + 1) % len(self._dataset)
        self._episode_id = episode_id or str(uuid4())
        self._step_count = 0
        return ReasoningGymObservation(question=self._entry["question"], reward=0.0, done=False)

    def step(
        self, action: ReasoningGymAction, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> ReasoningGymObservation:
        """Score ``action.answer`` against the current question; always ends the episode."""
        if self._entry is None or self._dataset is None:
            raise EnvInputError("step() before reset(): call reset() to get a question first", ErrorCode.SESSION_ERROR)
        self._step_count += 1
        score = float(self._dataset.score_answer(answer=action.answer, entry=self._entry))
        return ReasoningGymObservation(
            question=None,
            score=score,
            correct_answer=str(self._entry["answer"]),
            dataset_metadata=self._entry.get("metadata") or None,
            reward=score,
            done=True,
        )

    @property
    def state(self) -> State:
        """Episode id and step count, plus the dataset being served."""
        return State(
            episode_id=self._episode_id,
            step_count=self._step_count,
            dataset_name=self._dataset_name,
            dataset_size=len(self._dataset) if self._dataset is not None else None,
            next_index=self._next_index,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        """Name, description and version shown on ``/metadata``."""
        return EnvironmentMetadata(
            name="reasoning_gym",
            description="reasoning-gym procedurally generated reasoning tasks, scored by the dataset",
            version="0.1.0",
            author="rlstack",
        )
