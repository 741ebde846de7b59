"""Trainer configuration: YAML, environment and command-line overrides; shipped configs and tasks."""

from pathlib import Path

import pytest

from opencode_env_client.models import Limits
from trainer.coding_tasks import load_tasks
from trainer.config import ConfigError, bundled_config, load_config
from trainer.reporting import format_step, summarize


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_overrides_apply_in_order_with_yaml_types(tmp_path):
    path = write(tmp_path, "job: grpo\nmodel: m\ngrpo:\n  learning_rate: 0.1\n  max_steps: 5\n")
    env = {"TRAINER_GRPO__LEARNING_RATE": "1e-5", "TRAINER_GRPO__MAX_STEPS": "7", "OTHER": "x"}
    config = load_config(path, ["grpo.max_steps=3", "reasoning_gym.dataset_config={min_terms: 2}"], environ=env)
    assert config["grpo"] == {"learning_rate": 1e-5, "max_steps": 3}  # CLI beats env beats file
    assert config["reasoning_gym"] == {"dataset_config": {"min_terms": 2}}


@pytest.mark.parametrize("text, overrides, message", [
    ("job: grpo\nmodle: x\n", [], "unknown keys ['modle']"),
    ("job: grpo\n", ["grpo.max_steps"], "KEY=VALUE"),
    ("job: grpo\n", ["learning_rate=1"], "unknown setting 'learning_rate'"),
    ("- a\n- b\n", [], "must be a mapping"),
    ("job: [grpo\n", [], "invalid YAML"),
])
def test_bad_configs_are_rejected_with_the_key(tmp_path, text, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(write(tmp_path, text), overrides, environ={})


def test_missing_config_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", environ={})


@pytest.mark.parametrize("name", ["grpo-cpu.yaml", "grpo-gpu.yaml", "async-grpo-cpu.yaml", "async-grpo-gpu.yaml"])
def test_shipped_configs_load_by_bare_name(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    config = load_config(Path(name), environ={})
    assert config["job"] == ("grpo" if name.startswith("grpo") else "async-grpo")
    assert bundled_config(name).exists()


def test_shipped_task_set_is_graded_with_held_out_tests():
    tasks = load_tasks(split="all")
    assert len(tasks) == 50 and len({t.task_id for t in tasks}) == 50
    assert all(len(t.tests) >= 4 and "solution.py" in t.instruction for t in tasks)
    train, held_out = load_tasks(), load_tasks(split="held_out")
    assert len(train) == 40 and len(held_out) == 10 and not {t.task_id for t in train} & {t.task_id for t in held_out}
    easy = load_tasks(difficulties=[1], limit=3, limits={"max_turns": 4})
    assert [t.task_id[:3] for t in easy] == ["c01", "c02", "c03"]
    assert all(t.limits == Limits(max_turns=4) for t in easy)


def test_step_line_and_summary():
    record = {"reward": 0.25, "reward_std": 0.433, "loss": 0.012, "completions/mean_length": 21.0,
              "tokens_per_s": 48.2, "step_time_s": 9.8, "weight_version": "step-3"}
    assert format_step(3, 5, record) == \
        "step 3/5 | reward 0.250 ± 0.433 | loss 0.012 | len 21.0 | 48 tok/s | 9.8 s | weights step-3"
    records = [{"step": i, "reward": r, "step_time_s": 2.0} for i, r in enumerate([0.0, 0.1, 0.2, 0.5], 1)]
    text = summarize(records, {"metrics": Path("/o/metrics.jsonl"), "plot": None}, window=2)
    assert "first 2 steps 0.050, last 2 steps 0.350 (+0.300)" in text
    assert "metrics: /o/metrics.jsonl" in text and "plot" not in text
