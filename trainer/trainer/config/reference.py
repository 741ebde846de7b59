"""What ``python -m trainer config`` prints: a configuration with its defaults filled in, and the
reference of every key (path, type, default, meaning)."""

import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .schema import JOB_SECTIONS, TRL_SECTIONS, TrainerConfig, job_of_section
from .trl_sections import TRL_CLASSES
from .type_names import type_name


def effective(config: TrainerConfig) -> dict[str, Any]:
    """``config`` as plain data: every section of its job with defaults filled in, TRL sections as given."""
    data = config.model_dump(mode="json")
    return {
        k: v
        for k, v in data.items()
        if k not in JOB_SECTIONS["grpo"] + JOB_SECTIONS["async-grpo"] or k in JOB_SECTIONS[config.job]
    }


def _default_text(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= 40 else text[:37] + "..."


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return next(
        (a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)),
        None,
    )


def _section_lines(name: str, info: FieldInfo) -> list[str]:
    owner = job_of_section(name)
    scope = f"; {owner} jobs only" if owner else ""
    if name in TRL_SECTIONS:
        cls = TRL_CLASSES[name].replace(":", ".")
        return [
            "",
            f"{name}:  fields of TRL's {cls}{scope}; every field checked by name and type, see TRL's documentation",
        ]
    section = _model_of(info.annotation)
    lines = ["", f"{name}:  {(section.__doc__ or '').strip()}{scope}"]
    for key, sub in section.model_fields.items():
        lines.append(
            f"  {name}.{key}  ({type_name(sub.annotation)}, default {_default_text(sub)})  {sub.description or ''}"
        )
        nested = _model_of(sub.annotation)
        for inner, field in nested.model_fields.items() if nested else ():
            lines.append(f"    {name}.{key}.{inner}  (default {field.default!r})  {field.description or ''}")
    return lines


def reference() -> str:
    """Every key of the schema: its path, type, default and meaning (TRL sections by reference)."""
    lines: list[str] = []
    for name, info in TrainerConfig.model_fields.items():
        if name in TRL_SECTIONS or _model_of(info.annotation):
            lines += _section_lines(name, info)
        else:
            lines.append(
                f"{name}  ({type_name(info.annotation)}, default {_default_text(info)})  {info.description or ''}"
            )
    return "\n".join(lines).lstrip("\n")
