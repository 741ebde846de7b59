"""The coding task set shipped with the trainer: 50 stdin/stdout tasks of graded difficulty (1-3)
with held-out tests, in the OpenCode env service's ``Task`` shape."""

import json
from importlib import resources
from pathlib import Path
from typing import Any, Optional, Sequence

from opencode_env_client.models import Task


def load_tasks(path: Optional[Path] = None, difficulties: Optional[Sequence[int]] = None,
               limit: Optional[int] = None, limits: Optional[dict[str, Any]] = None) -> list[Task]:
    """Tasks from ``path`` (default: the shipped set), filtered by difficulty, at most ``limit``.

    ``limits`` (the service's per-rollout ``Limits`` fields) is applied to every task.
    """
    text = path.read_text() if path else (resources.files("trainer") / "data" / "coding_tasks.jsonl").read_text()
    tasks = []
    for line in text.splitlines():
        if not line.strip():
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

    return Dataset.from_list([{"prompt": [{"role": "user", "content": t.instruction}], "task_id": t.task_id}
                              for t in tasks])
