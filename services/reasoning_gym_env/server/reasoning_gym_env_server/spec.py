"""Reset arguments checked and bounded into a ``DatasetRequest``, before any dataset code runs.

The bounds limit the *description* of a dataset (its size, numbers, nesting and length); what the
description costs to build, generate and score is bounded by the worker processes (``pool.py``).
"""

import math
import pickle
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from reasoning_gym.factory import DATASETS

from .errors import EnvInputError

# Bounds of a dataset_config (and of each dataset_specs[].config): every legitimate config of the
# 105 datasets fits with room to spare (the largest default number is count_bits' 2**31 - 1).
MAX_CONFIG_DEPTH = 8
MAX_CONFIG_ITEMS = 10_000
MAX_CONFIG_STRING = 10_000
MAX_CONFIG_NUMBER = 2**53
MAX_COMPOSITE_SPECS = 200


def dataset_names() -> list[str]:
    """Names accepted by ``reset(dataset_name=...)``."""
    return sorted(DATASETS)


@dataclass(frozen=True, eq=False)
class DatasetRequest:
    """A checked dataset description: what the worker passes to ``reasoning_gym.create_dataset``.

    ``config`` holds the dataset's keyword arguments; for ``composite`` it is empty and ``specs``
    holds ``(name, weight, config)`` triples. ``wire`` is its pickled form, computed once: what
    every worker call carries and what workers key their built datasets by.
    """

    name: str
    seed: int
    size: int
    config: dict[str, Any]
    specs: tuple[tuple[str, float, dict[str, Any]], ...] = ()

    @cached_property
    def wire(self) -> bytes:
        """The request pickled (equal for requests built from the same arguments)."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)


def _require_int(name: str, value: int, minimum: int, maximum: int) -> int:
    if not minimum <= value <= maximum:
        raise EnvInputError(f"'{name}' must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def _check_config(where: str, config: Any) -> dict[str, Any]:
    """``config`` if it is a JSON object within the bounds above, else ``EnvInputError``."""
    if not isinstance(config, dict):
        raise EnvInputError(f"'{where}' must be an object, got {config!r}"[:300])
    items = 0
    stack: list[tuple[Any, int]] = [(config, 1)]
    while stack:
        value, depth = stack.pop()
        items += 1
        if items > MAX_CONFIG_ITEMS:
            raise EnvInputError(f"'{where}' has more than {MAX_CONFIG_ITEMS} values")
        if isinstance(value, (dict, list)):
            if depth > MAX_CONFIG_DEPTH:
                raise EnvInputError(f"'{where}' is nested deeper than {MAX_CONFIG_DEPTH} levels")
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
        elif isinstance(value, str):
            if len(value) > MAX_CONFIG_STRING:
                raise EnvInputError(f"'{where}' has a string longer than {MAX_CONFIG_STRING} characters")
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if abs(value) > MAX_CONFIG_NUMBER:
                raise EnvInputError(f"'{where}' has a number beyond ±2**53: {str(value)[:40]}...")
        elif isinstance(value, float):
            if not math.isfinite(value) or abs(value) > MAX_CONFIG_NUMBER:
                raise EnvInputError(f"'{where}' has a number that is not finite or beyond ±2**53: {value!r}")
        else:
            raise EnvInputError(f"'{where}' holds a {type(value).__name__}; only JSON values are allowed")
    return config


def _composite_specs(specs: Any) -> tuple[tuple[str, float, dict[str, Any]], ...]:
    if not isinstance(specs, list) or not specs:
        raise EnvInputError("dataset_name 'composite' needs a non-empty list 'dataset_specs' of {name, weight, config}")
    if len(specs) > MAX_COMPOSITE_SPECS:
        raise EnvInputError(f"'dataset_specs' may list at most {MAX_COMPOSITE_SPECS} datasets")
    parsed = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise EnvInputError(f"dataset_specs[{i}] must be an object with a string 'name', got {spec!r}"[:300])
        unknown = set(spec) - {"name", "weight", "config"}
        if unknown:
            raise EnvInputError(f"dataset_specs[{i}] has unknown keys {sorted(unknown)}; allowed: name, weight, config")
        if spec["name"] not in DATASETS or spec["name"] == "composite":
            raise EnvInputError(
                f"dataset_specs[{i}]: unknown dataset '{spec['name'][:100]}' (GET /datasets lists them)"
            )
        config = _check_config(f"dataset_specs[{i}].config", spec.get("config") or {})
        weight = spec.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= MAX_CONFIG_NUMBER:
            raise EnvInputError(f"dataset_specs[{i}].weight must be a positive number, got {weight!r}")
        parsed.append((spec["name"], float(weight), config))
    return tuple(parsed)


def dataset_request(
    dataset_name: str,
    seed: int | None,
    size: int | None,
    max_size: int,
    dataset_config: dict[str, Any] | None = None,
    dataset_specs: list[dict[str, Any]] | None = None,
) -> DatasetRequest:
    """Bound reset arguments (already typed by ``ReasoningGymReset``) that name a dataset; raises
    ``EnvInputError`` with a clear message."""
    if seed is None or size is None:
        raise EnvInputError(f"dataset_name '{dataset_name[:100]}' needs both 'seed' and 'size'")
    seed = _require_int("seed", seed, 0, MAX_CONFIG_NUMBER)
    size = _require_int("size", size, 1, max_size)
    config = _check_config("dataset_config", dataset_config) if dataset_config is not None else {}
    if dataset_name == "composite":
        if config:
            raise EnvInputError(
                "dataset_name 'composite' takes each dataset's config in 'dataset_specs', not 'dataset_config'"
            )
        return DatasetRequest(dataset_name, seed, size, {}, _composite_specs(dataset_specs))
    if dataset_specs is not None:
        raise EnvInputError("'dataset_specs' is only for dataset_name 'composite'")
    if dataset_name not in DATASETS:
        raise EnvInputError(
            f"Unknown dataset '{dataset_name[:100]}' ({len(DATASETS)} available; GET /datasets lists them)"
        )
    return DatasetRequest(dataset_name, seed, size, config)
