"""The coding task set shipped with the trainer: 50 stdin/stdout tasks of graded difficulty (1-3)
with held-out tests, in the OpenCode env service's ``Task`` shape.

The set is split once and for all: every ``HELD_OUT_EVERY``-th task of the file (10 of 50, of each
difficulty) is held out for evaluation, and training jobs see only the others.
"""

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from opencode_env_client.models import Task

HELD_OUT_EVERY = 5
SPLITS = ("train", "held_out", "all")


def load_tasks(
    path: Path | None = None,
    difficulties: Sequence[int] | None = None,
    limit: int | None = None,
    limits: dict[str, Any] | None = None,
    split: str = "train",
) -> list[Task]:
    """Tasks of ``split`` from ``path`` (default: the shipped set), filtered by difficulty, at most ``limit``.

    ``limits`` (the service's per-rollout ``Limits`` fields) is applied to every task.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    text = path.read_text() if path else (resources.files("trainer") / "data" / "coding_tasks.jsonl").read_text()
    tasks = []
    lines = [line for line in text.splitlines() if line.strip()]
    for position, line in enumerate(lines):
        held_out = position % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
        if split != "all" and held_out != (split == "held_out"):
            continue
        raw = json.loads(line)
        if difficulties and raw.get("difficulty") not in difficulties:
            continue
        task = {"task_id": raw["task_id"], "instruction": raw["instruction"], "tests": raw["tests"]}
        if limits:
            task["limits"] = dict(limits)
        tasks.append(Task.model_validate(task))
    return tasks[:limit] if limit else tasks


def prompts_dataset(tasks: Sequence[Task]) -> Any:
    """One row per task: the instruction as the user prompt (the session factory maps it back to the task)."""
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t.instruction}], "task_id": t.task_id} for t in tasks]
    )
