"""Trainer configuration: YAML, environment and command-line overrides; shipped configs and tasks."""

import shlex
import typing
from pathlib import Path

import pytest
import yaml
from opencode_env_client.models import Limits
from pydantic import BaseModel
from trainer.__main__ import main
from trainer.config import ConfigError, TrainerConfig, bundled_config, load_config
from trainer.envs.coding_tasks import load_tasks
from trainer.training.reporting import format_step, reward_delta, summarize, trailing_mean


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_overrides_apply_in_order_with_yaml_types(tmp_path):
    path = write(tmp_path, "job: grpo\nmodel: m\ngrpo:\n  learning_rate: 0.1\n  max_steps: 5\n")
    env = {"TRAINER_GRPO__LEARNING_RATE": "1e-5", "TRAINER_GRPO__MAX_STEPS": "7", "OTHER": "x"}
    config = load_config(path, ["grpo.max_steps=3", "reasoning_gym.dataset_config={min_terms: 2}"], environ=env)
    assert config.grpo == {"learning_rate": 1e-5, "max_steps": 3}  # CLI beats env beats file
    assert config.reasoning_gym.dataset_config == {"min_terms": 2}


def test_an_empty_variable_leaves_the_yaml_value(tmp_path):
    """Compose passes TRAINER_GRPO__MAX_STEPS=${GRPO_MAX_STEPS:-}: empty unless the user set it."""
    path = write(tmp_path, "job: grpo\nmodel: m\ngrpo:\n  max_steps: 5\n")
    assert load_config(path, environ={"TRAINER_GRPO__MAX_STEPS": ""}).grpo == {"max_steps": 5}
    assert load_config(path, environ={"TRAINER_GRPO__MAX_STEPS": "9"}).grpo == {"max_steps": 9}


@pytest.mark.parametrize(
    "text, overrides, environ, message",
    [
        # Unknown keys at depth 1, 2 and 3, with a suggestion, from the file, --set and TRAINER_* alike.
        ("job: grpo\nmodle: x\n", [], {}, "job.yaml: unknown key `modle`: did you mean `model`?"),
        (
            "reasoning_gym:\n  datset: aiw\n",
            [],
            {},
            "job.yaml: unknown key `reasoning_gym.datset`: did you mean `dataset`?",
        ),
        (
            "job: grpo\n",
            ["reasoning_gym.datset=aiw"],
            {},
            "--set reasoning_gym.datset=aiw: unknown key `reasoning_gym.datset`: did you mean `dataset`?",
        ),
        (
            "job: grpo\n",
            [],
            {"TRAINER_EVAL__NUM_QUESTION": "5"},
            "TRAINER_EVAL__NUM_QUESTION: unknown key `eval.num_question`: did you mean `num_questions`?",
        ),
        (
            "job: async-grpo\nopencode:\n  limits: {max_turn: 2}\n",
            [],
            {},
            "unknown key `opencode.limits.max_turn`: did you mean `max_turns`?",
        ),
        ("job: grpo\n", ["learning_rate=1"], {}, "unknown key `learning_rate`: known keys: "),
        # Wrong types name the key's path.
        ("eval:\n  num_questions: many\n", [], {}, "`eval.num_questions`: expected int, got str 'many'"),
        ("job: grpo\n", ["eval.greedy=3"], {}, "--set eval.greedy=3: `eval.greedy`: expected bool, got int 3"),
        (
            "job: async-grpo\n",
            [],
            {"TRAINER_OPENCODE__TASK_IDS": "[1, x]"},
            "`opencode.task_ids[0]`: expected str, got int 1",
        ),
        ("job: grpo\n", ["cpu_threads=two"], {}, "--set cpu_threads=two: `cpu_threads`: expected int, got str 'two'"),
        ("job: grpo\n", ["eval.generate=remote"], {}, "`eval.generate` must be one of local, inference, got 'remote'"),
        (
            "job: async-grpo\nopencode:\n  limits: {max_turns: 0}\n",
            [],
            {},
            "job.yaml: `opencode.limits.max_turns` must be >= 1, got 0",
        ),
        ("job: grpo\n", ["eval.num_questions=0"], {}, "`eval.num_questions` must be >= 1, got 0"),
        ("eval:\n  num_questions: 10\n  pool: 5\n", [], {}, "eval.pool (5) must be >= eval.num_questions (10)"),
        # Another job's section is an error, from the file, --set and TRAINER_* alike.
        (
            "job: async-grpo\ngrpo:\n  max_steps: 3\n",
            [],
            {},
            "job.yaml: section `grpo` is read by grpo jobs only, and this is a `job: async-grpo` config",
        ),
        (
            "job: grpo\n",
            ["collect.timeout_s=5"],
            {},
            "--set collect.timeout_s=5: section `collect` is read by async-grpo",
        ),
        ("job: training\n", [], {}, "`job` must be one of grpo, async-grpo, got 'training'"),
        ("eval: 3\n", [], {}, "`eval` must be a mapping, got int"),
        ("job: grpo\n", ["grpo.max_steps"], {}, "KEY=VALUE"),
        ("- a\n- b\n", [], {}, "the top level must be a mapping"),
        ("job: [grpo\n", [], {}, "invalid YAML"),
    ],
)
def test_bad_configs_are_rejected_with_the_key(tmp_path, text, overrides, environ, message):
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), overrides, environ=environ)
    assert message in str(caught.value)


def test_a_negative_thread_count_is_refused_before_the_job_starts(tmp_path, capsys):
    path = write(tmp_path, "job: grpo\nmodel: m\n")
    assert main(["eval", "--config", str(path), "--set", "cpu_threads=-1"]) == 2
    assert "--set cpu_threads=-1: `cpu_threads` must be >= 0, got -1" in capsys.readouterr().err


def test_a_config_for_another_job_names_the_command(tmp_path, capsys):
    path = write(tmp_path, "job: grpo\nmodel: m\n")
    assert main(["async-grpo", "--config", str(path), "--dry-run"]) == 2
    assert "is a 'grpo' config; run `python -m trainer grpo`" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="section `opencode` is read by async-grpo jobs only"):
        load_config(write(tmp_path, "opencode: {}\n"), environ={}, job="grpo")  # no `job:`: the command's


def test_another_jobs_variable_is_skipped_with_a_warning(tmp_path, caplog):
    """The environment is shared by the stack's jobs (Compose's .env reaches the whole trainer
    container): a TRAINER_* variable of the other job's section is not an error, but it is said."""
    environ = {"TRAINER_GRPO__MAX_STEPS": "5", "TRAINER_ASYNC_GRPO__MAX_STEPS": "3", "TRAINER_SEED": "7"}
    with caplog.at_level("WARNING"):
        config = load_config(write(tmp_path, "job: async-grpo\n"), environ=environ)
    assert config.async_grpo == {"max_steps": 3}
    assert config.grpo is None
    assert config.seed == 7
    assert "TRAINER_GRPO__MAX_STEPS is for grpo jobs; this async-grpo job does not read it" in caplog.text
    assert "ASYNC_GRPO__MAX_STEPS is for" not in caplog.text


def test_the_parsed_config_resolves_the_defaults_that_follow_other_keys(tmp_path):
    config = load_config(
        write(tmp_path, "job: grpo\nseed: 7\ngrpo: {temperature: 0.7, max_completion_length: 32}\n"), environ={}
    )
    assert config.reasoning_gym.seed == 7
    assert config.eval.seed == 1007
    assert config.eval.temperature == 0.7
    assert config.eval.max_new_tokens == 32
    assert config.opencode is None  # another job's section: not there at all
    with pytest.raises(Exception, match="frozen"):
        config.eval.seed = 1  # parsed once: nothing downstream changes it


def test_env_overrides_are_typed_and_stack_variables_are_not_settings(tmp_path):
    env = {
        "TRAINER_EVAL__NUM_QUESTIONS": "20",
        "TRAINER_OPENCODE__LIMITS__MAX_TURNS": "3",
        "TRAINER_GPU": "1",
        "TRAINER_IP": "172.28.0.10",
    }  # the GPU stack's Compose variables
    config = load_config(write(tmp_path, "job: async-grpo\n"), environ=env)
    assert config.eval.num_questions == 20
    assert config.eval.pool == 2000
    assert config.opencode.limits == Limits(max_turns=3)


def test_config_command_prints_the_effective_config_and_every_key(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert main(["config", "--config", "grpo-cpu.yaml", "--set", "eval.num_questions=7"]) == 0
    out = capsys.readouterr().out
    effective, reference = out.split("# every key")
    shown = yaml.safe_load(effective)
    assert shown["eval"]["num_questions"] == 7
    assert shown["eval"]["concurrency"] == 2  # override and default
    assert shown["reasoning_gym"]["dataset"] == "aiw"
    assert shown["pretrain"]["questions"] == 8000
    for line in (
        "reasoning_gym.seed  (int or null, default None)",
        "opencode.limits.max_turns  (default 16)",
        "eval.generate  (local|inference, default local)",
        "grpo:  fields of TRL's trl.GRPOConfig; grpo jobs only",
    ):
        assert line in reference
    assert "opencode" not in shown  # another job's section
    # Every key of the schema is in the reference, so it cannot drift from the code that reads it.
    for name, info in TrainerConfig.model_fields.items():
        assert f"\n{name}  " in reference or f"\n{name}:  " in reference, name
        section = next((a for a in (info.annotation, *typing.get_args(info.annotation)) if _is_model(a)), None)
        for sub in section.model_fields if section else ():
            assert f"\n  {name}.{sub}  (" in reference, f"{name}.{sub}"
    assert main(["config", "--config", "grpo-cpu.yaml", "--set", "eval.pool=x"]) == 2
    assert "configuration error: --set eval.pool=x: `eval.pool`: expected int" in capsys.readouterr().err


def _is_model(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def test_missing_config_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", environ={})


@pytest.mark.parametrize("name", ["grpo-cpu.yaml", "grpo-gpu.yaml", "async-grpo-cpu.yaml", "async-grpo-gpu.yaml"])
def test_shipped_configs_load_by_bare_name(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    config = load_config(Path(name), environ={})
    assert config.job == ("grpo" if name.startswith("grpo") else "async-grpo")
    assert bundled_config(name).exists()


def test_shipped_task_set_is_graded_with_held_out_tests():
    tasks = load_tasks(split="all")
    assert len(tasks) == 50
    assert len({t.task_id for t in tasks}) == 50
    assert all(len(t.tests) >= 4 and "solution.py" in t.instruction for t in tasks)
    train, held_out = load_tasks(), load_tasks(split="held_out")
    assert len(train) == 40
    assert len(held_out) == 10
    assert not {t.task_id for t in train} & {t.task_id for t in held_out}
    easy = load_tasks(difficulties=[1], limit=3, limits={"max_turns": 4})
    assert [t.task_id[:3] for t in easy] == ["c01", "c02", "c03"]
    assert all(t.limits == Limits(max_turns=4) for t in easy)


def test_step_line_and_summary():
    record = {
        "reward": 0.25,
        "reward_std": 0.433,
        "loss": 0.012,
        "completions/mean_length": 21.0,
        "tokens_per_s": 48.2,
        "step_time_s": 9.8,
        "weight_version": "step-3",
    }
    assert (
        format_step(3, 5, record)
        == "step 3/5 | reward 0.250 ± 0.433 | loss 0.012 | len 21.0 | 48 tok/s | 9.8 s | weights step-3"
    )
    records = [{"step": i, "reward": r, "step_time_s": 2.0} for i, r in enumerate([0.0, 0.1, 0.2, 0.5], 1)]
    text = summarize(records, {"metrics": Path("/o/metrics.jsonl"), "plot": None}, 4, window=2)
    assert "first 2 steps 0.050, last 2 steps 0.350 (+0.300)" in text
    assert "metrics: /o/metrics.jsonl" in text
    assert "plot" not in text
    assert "Only 4 reward entries logged" in text  # the walkthrough's guard


def test_the_walkthroughs_reward_delta_over_logged_steps():
    """logging_steps: 10 over 150 steps logs 15 rewards: the first five against the last five, in points."""
    rewards = [0.6, 0.6, 0.65, 0.6, 0.675] + [0.7] * 5 + [0.8, 0.85, 0.8, 0.85, 0.8625]
    records = [{"step": 10 * i, "reward": r} for i, r in enumerate(rewards, 1)]
    text = summarize(records, {}, 150)
    assert text.startswith("finished 150 optimizer steps\n")
    assert "Initial reward (first 5 logs avg): 62.50%\n" in text
    assert "Final reward   (last 5 logs avg):  83.25%\n" in text
    assert text.endswith("Delta:                             +20.75 pp")
    assert reward_delta(rewards) == pytest.approx({"initial": 0.625, "final": 0.8325, "points": 20.75})


def test_trailing_mean_averages_each_step_with_the_steps_before_it():
    assert trailing_mean([1.0, 0.0, 0.5, 1.0, 0.0], 2) == [1.0, 0.5, 0.25, 0.75, 0.5]
    assert trailing_mean([0.2, 0.4, 0.9], 5) == pytest.approx([0.2, 0.3, 0.5])


def readme_error_samples() -> list[tuple[str, str]]:
    """(command, printed error) of each sample in trainer/README.md's Configs section."""
    readme = (Path(__file__).resolve().parents[2] / "trainer" / "README.md").read_text()
    block = readme.split("checks these samples against the schema):\n\n```\n", 1)[1].split("```", 1)[0]
    lines = block.strip().splitlines()
    return [(lines[i][2:], lines[i + 1]) for i in range(0, len(lines), 2)]


@pytest.mark.parametrize(("command", "printed"), readme_error_samples())
def test_the_readme_error_samples_are_what_the_trainer_prints(command, printed, monkeypatch, capsys):
    words = shlex.split(command)
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        monkeypatch.setenv(name, value)
    assert words[:3] == ["python", "-m", "trainer"]
    assert main(words[3:]) == 2
    assert capsys.readouterr().err.strip() == printed
