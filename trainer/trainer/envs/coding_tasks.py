"""Coding tasks in the OpenCode env service's ``Task`` shape, read from a JSONL file: the set shipped
with the trainer (50 stdin/stdout tasks of graded difficulty 1-3 with held-out tests) or a user's
(``opencode.tasks``).

A line is one task: ``Task``'s fields (``task_id``, required and unique here, ``instruction``,
``files``, ``setup``, ``tests``, ``test_command``, ``verify_commands``, ``test_timeout_s``,
``limits``), plus ``difficulty`` (what ``opencode.difficulties`` selects) and ``held_out`` (true: an
evaluation-only task, never trained on). The shipped set is split once and for all by position
instead: every ``HELD_OUT_EVERY``-th task of the file (10 of 50, of each difficulty) is held out.
The format, for users: services/opencode_env/README.md.
"""

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pydantic
from opencode_env_client.models import Limits, Task
from pydantic import Field

from ..config import ConfigError
from ..config.messages import first_message

HELD_OUT_EVERY = 5
SPLITS = ("train", "held_out", "all")


class TaskLine(Task):
    """One line of a task file: a ``Task`` with its own id, its difficulty and its split."""

    task_id: str = Field(min_length=1)
    difficulty: int | None = Field(None, ge=1, description="what opencode.difficulties selects")
    held_out: bool = Field(False, description="an evaluation-only task (the shipped set splits by position)")

    def task(self, limits: Mapping[str, Any] | Limits | None) -> Task:
        """The service's ``Task``; ``limits`` apply when the line sets none of its own."""
        fields = self.model_dump(include=set(Task.model_fields))
        if limits is not None and "limits" not in self.model_fields_set:
            fields["limits"] = dict(limits)
        return Task.model_validate(fields)


def read_task_file(path: Path | None = None) -> list[TaskLine]:
    """Every task of ``path`` (default: the shipped set), in file order; a ``ConfigError`` naming the
    file and the line for a line that is not a valid task, or repeats another's id or instruction."""
    if path is None:
        name = "the shipped coding tasks"
        text = (resources.files("trainer") / "data" / "coding_tasks.jsonl").read_text()
    else:
        name = str(path)
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"opencode.tasks: cannot read {path}: {exc}") from None
    entries: list[TaskLine] = []
    first_line: dict[tuple[str, str], int] = {}  # (field, value) -> the line that had it
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}: line {number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: a task is a JSON object, got {type(raw).__name__}")
        try:
            entry = TaskLine.model_validate(raw)
        except pydantic.ValidationError as exc:
            raise ConfigError(f"{where}: {first_message(exc, TaskLine)}") from None
        for field in ("task_id", "instruction"):
            earlier = first_line.setdefault((field, getattr(entry, field)), number)
            if earlier != number:
                raise ConfigError(f"{where}: repeats the {field} of line {earlier} (each task needs its own)")
        entries.append(entry)
    return entries


def load_tasks(
    path: Path | None = None,
    difficulties: Sequence[int] | None = None,
    limit: int | None = None,
    limits: Mapping[str, Any] | Limits | None = None,
    split: str = "train",
) -> list[Task]:
    """Tasks of ``split`` from ``path`` (default: the shipped set), filtered by difficulty, at most ``limit``.

    ``limits`` (the service's per-rollout ``Limits`` or its fields) applies to every task whose line
    sets none.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    tasks = []
    for position, entry in enumerate(read_task_file(path)):
        held_out = position % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 if path is None else entry.held_out
        if split != "all" and held_out != (split == "held_out"):
            continue
        if difficulties and entry.difficulty not in difficulties:
            continue
        tasks.append(entry.task(limits))
    return tasks[:limit] if limit else tasks


def prompts_dataset(tasks: Sequence[Task]) -> Any:
    """One row per task: the instruction as the user prompt (the session factory maps it back to the task)."""
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t.instruction}], "task_id": t.task_id} for t in tasks]
    )
