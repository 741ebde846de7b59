"""A user's task file (``opencode.tasks``): the full ``Task`` shape per line, ``held_out`` lines for
evaluation only, and every bad line named by file and line number."""

import json
from pathlib import Path

import pytest
from opencode_env_client.models import Limits, TestCase
from trainer.config import ConfigError
from trainer.envs.coding_tasks import load_tasks

FULL = {
    "task_id": "fix-add",
    "difficulty": 2,
    "instruction": "Fix `add` in calc.py.",
    "files": {"calc.py": "def add(a, b):\n    return a - b\n", "main.py": "print(1)\n"},
    "setup": ["mkdir -p data"],
    "tests": [{"stdin": "2 3\n", "expected_stdout": "5"}, {"expected_stdout": "a b", "compare": "tokens"}],
    "test_command": "python3 main.py",
    "verify_commands": ["test -f calc.py"],
    "test_timeout_s": 20,
    "limits": {"max_turns": 8},
}


def write_tasks(tmp_path: Path, *lines: dict | str) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def task(task_id: str, **fields: object) -> dict:
    return {"task_id": task_id, "instruction": f"Solve {task_id}.", **fields}


def test_a_line_with_every_field_loads_as_the_services_task(tmp_path):
    (loaded,) = load_tasks(write_tasks(tmp_path, FULL), limits={"max_turns": 2})
    assert loaded.task_id == "fix-add"
    assert loaded.files == FULL["files"]
    assert loaded.setup == ["mkdir -p data"]
    assert loaded.tests == [
        TestCase(stdin="2 3\n", expected_stdout="5"),
        TestCase(expected_stdout="a b", compare="tokens"),
    ]
    assert (loaded.test_command, loaded.verify_commands, loaded.test_timeout_s) == (
        "python3 main.py",
        ["test -f calc.py"],
        20.0,
    )
    assert loaded.limits == Limits(max_turns=8)  # the line's own limits win over opencode.limits


def test_the_sections_limits_apply_to_tasks_without_their_own(tmp_path):
    (loaded,) = load_tasks(write_tasks(tmp_path, task("a")), limits=Limits(max_turns=3))
    assert loaded.limits == Limits(max_turns=3)


def test_held_out_lines_are_for_evaluation_only(tmp_path):
    path = write_tasks(tmp_path, task("a"), task("b", held_out=True), "", task("c"), task("d", held_out=False))
    assert [t.task_id for t in load_tasks(path)] == ["a", "c", "d"]  # not every 5th: the flag decides
    assert [t.task_id for t in load_tasks(path, split="held_out")] == ["b"]
    assert [t.task_id for t in load_tasks(path, split="all")] == ["a", "b", "c", "d"]


def test_difficulties_select_on_the_lines_difficulty(tmp_path):
    path = write_tasks(tmp_path, task("a", difficulty=1), task("b", difficulty=2), task("c"))
    assert [t.task_id for t in load_tasks(path, difficulties=[2])] == ["b"]


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", "line 3: not JSON: Expecting property name enclosed in double quotes (column 2)"),
        ("[1, 2]", "line 3: a task is a JSON object, got list"),
        (json.dumps({"task_id": "x"}), "line 3: `instruction`: Field required"),
        (json.dumps(task("x", instuction="typo")), "line 3: unknown key `instuction`: did you mean `instruction`?"),
        (json.dumps(task("x", tests=[{"stdin": "1"}])), "line 3: `tests[0].expected_stdout`: Field required"),
        (json.dumps(task("x", files={"../up.py": ""})), "line 3: `files`: Value error, file path '../up.py'"),
        (json.dumps(task("x", test_timeout_s=0)), "line 3: `test_timeout_s` must be > 0.0, got 0"),
        (json.dumps(task("x", held_out="maybe")), "line 3: `held_out`: Input should be a valid boolean"),
        (json.dumps(task("")), "line 3: `task_id`: String should have at least 1 character"),
        (json.dumps(task("a")), "line 3: repeats the task_id of line 1 (each task needs its own)"),
        (json.dumps({**task("z"), "instruction": "Solve a."}), "line 3: repeats the instruction of line 1"),
    ],
)
def test_a_bad_line_is_named_by_file_and_number(tmp_path, bad, message):
    path = write_tasks(tmp_path, task("a"), task("b"), bad)
    with pytest.raises(ConfigError) as caught:
        load_tasks(path)
    assert str(caught.value).startswith(f"{path}: "), caught.value
    assert message in str(caught.value)


def test_a_missing_file_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"opencode.tasks: cannot read .*nope.jsonl"):
        load_tasks(tmp_path / "nope.jsonl")


def test_the_shipped_set_keeps_its_split_by_position():
    shipped = load_tasks(split="all")
    held_out = load_tasks(split="held_out")
    assert [t.task_id for t in held_out] == [t.task_id for t in shipped[4::5]]
