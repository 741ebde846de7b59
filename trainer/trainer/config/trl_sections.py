"""The ``grpo`` and ``async_grpo`` sections: fields of TRL's own config classes, checked by name
and type against the installed TRL (where TRL is not installed, a unit-test environment in which no
job can run, a section is taken as given and TRL checks it when the job builds its config)."""

import dataclasses
import difflib
import importlib
import typing
from functools import cache
from typing import Any

import pydantic
from pydantic_core import PydanticCustomError

from .type_names import type_name

TRL_CLASSES = {
    "grpo": "trl:GRPOConfig",
    "async_grpo": "trl.experimental.async_grpo:AsyncGRPOConfig",
}


@cache
def trl_class(spec: str) -> type | None:
    """TRL's config class ``module:Class``; None where TRL is not installed."""
    module, name = spec.split(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        return None


@cache
def _field_adapters(cls: type) -> dict[str, pydantic.TypeAdapter | None]:
    """A strict validator per dataclass field (None: an annotation pydantic cannot check)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - annotations that do not resolve are checked by name only
        hints = {}
    adapters: dict[str, pydantic.TypeAdapter | None] = {}
    for f in dataclasses.fields(cls):
        try:
            adapters[f.name] = pydantic.TypeAdapter(hints[f.name], config=pydantic.ConfigDict(strict=True))
        except Exception:  # noqa: BLE001 - no hint, or a type pydantic has no schema for
            adapters[f.name] = None
    return adapters


def check_trl_section(name: str, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` if every key is a field of the section's TRL class with a value of its type; a
    ``PydanticCustomError`` naming the key otherwise."""
    cls = trl_class(TRL_CLASSES[name])
    if cls is None:
        return value
    adapters = _field_adapters(cls)
    for key, item in value.items():
        if key not in adapters:
            close = difflib.get_close_matches(str(key), list(adapters), n=1, cutoff=0.6)
            hint = f"did you mean `{close[0]}`? " if close else ""
            raise PydanticCustomError(
                "trl_field",
                "unknown key `{where}`: {hint}(`{name}` takes the {count} fields of TRL's {cls})",
                {"where": f"{name}.{key}", "hint": hint, "name": name, "count": len(adapters), "cls": cls.__name__},
            )
        adapter = adapters[key]
        if adapter is None or item is None:
            continue
        try:
            adapter.validate_python(item)
        except pydantic.ValidationError:
            expected = type_name(typing.get_type_hints(cls).get(key, Any))
            raise PydanticCustomError(
                "trl_field",
                "`{where}`: expected {expected}, got {got} {value}",
                {"where": f"{name}.{key}", "expected": expected, "got": type(item).__name__, "value": repr(item)},
            ) from None
    return value
