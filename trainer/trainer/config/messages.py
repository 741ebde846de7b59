"""pydantic's validation errors as one line a person acts on: the key's dotted path, what was
expected and what was given, and for an unknown key the closest known one."""

import difflib
import typing
from typing import Any, Literal

import pydantic
from pydantic import BaseModel

# pydantic error types for a value of the wrong type -> the type it expected.
EXPECTED = {
    "int_type": "int",
    "float_type": "float",
    "bool_type": "bool",
    "string_type": "str",
    "list_type": "list",
    "none_required": "null",
}
MAPPING_ERRORS = ("dict_type", "model_type", "model_attributes_type")
# Errors the schema raises itself: their text is complete.
OWN_ERRORS = ("trl_field", "foreign_section", "eval_pool", "pretrain_batch", "hook_path")


def dotted(loc: tuple[Any, ...]) -> str:
    """``("opencode", "task_ids", 0)`` -> ``opencode.task_ids[0]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _unwrap(annotation: Any) -> Any:
    """The model class inside ``X | None`` (or the annotation itself)."""
    for option in (annotation, *typing.get_args(annotation)):
        if isinstance(option, type) and issubclass(option, BaseModel):
            return option
    return annotation


def annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The annotation of the field at ``loc`` (a model class for a section); None past a mapping."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return None
        current = current.model_fields[part].annotation
    return current


def _unknown_key(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    parent, key = loc[:-1], str(loc[-1])
    owner = _unwrap(annotation_at(model, parent)) if parent else model
    known = list(owner.model_fields) if isinstance(owner, type) and issubclass(owner, BaseModel) else []
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    suggestion = f"did you mean `{close[0]}`? " if close else ""
    where = f" of `{dotted(parent)}`" if parent else ""
    return f"unknown key `{dotted(loc)}`: {suggestion}known keys{where}: {', '.join(sorted(known))}"


def message(error: Any, model: type[BaseModel]) -> str:
    """One pydantic error (an ``errors()`` entry) of validating ``model`` as a sentence."""
    loc, kind, given = tuple(error["loc"]), error["type"], error.get("input")
    path = dotted(loc)
    if kind == "extra_forbidden":
        return _unknown_key(model, loc)
    if kind in MAPPING_ERRORS:
        return f"`{path}` must be a mapping, got {type(given).__name__}" if loc else "the top level must be a mapping"
    if kind == "literal_error":
        annotation = annotation_at(model, loc)
        choices = next(
            (typing.get_args(a) for a in (annotation, *typing.get_args(annotation)) if typing.get_origin(a) is Literal),
            (),
        )
        return f"`{path}` must be one of {', '.join(map(str, choices))}, got {given!r}"
    if kind in EXPECTED:
        return f"`{path}`: expected {EXPECTED[kind]}, got {type(given).__name__} {given!r}"
    if kind in ("greater_than_equal", "greater_than", "less_than", "less_than_equal"):
        bound = {"greater_than_equal": ">=", "greater_than": ">", "less_than": "<", "less_than_equal": "<="}[kind]
        limit = next(iter(error["ctx"].values()))
        return f"`{path}` must be {bound} {limit}, got {given!r}"
    if kind in OWN_ERRORS:
        return error["msg"]
    if path:
        return f"`{path}`: {error['msg']}"
    return error["msg"]


def first_message(exc: pydantic.ValidationError, model: type[BaseModel]) -> str:
    """The first error of ``exc`` as a sentence (the one a person fixes first)."""
    return message(exc.errors()[0], model)
