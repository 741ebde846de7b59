"""Pre-training of the CPU policy: its settings, the answer position, and the held-out evaluation
skipping every pre-training question."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainer.config import ConfigError, ReasoningGymConfig
from trainer.config.loading import validate
from trainer.evaluation import questions as held_out
from trainer.evaluation.questions import PRETRAINING_MANIFEST, held_out_questions, pretraining_digests, question_digest
from trainer.jobs.pretrain import _answer_position, completion_text, goes_on


def pretrain_settings(section: dict) -> object:
    return validate({"job": "grpo", "pretrain": section}, "test").pretrain


def test_settings_are_typed_and_unknown_keys_refused() -> None:
    settings = pretrain_settings({"questions": 500, "learning_rate": 2})
    assert (settings.questions, settings.learning_rate, settings.base) == (500, 2, "/models/default")
    with pytest.raises(ConfigError, match="unknown key `pretrain.questons`: did you mean `questions`?"):
        pretrain_settings({"questons": 10})
    with pytest.raises(ConfigError, match="`pretrain.skill_steps`: expected int, got str 'many'"):
        pretrain_settings({"skill_steps": "many"})
    with pytest.raises(ConfigError, match="unknown key `pretrain.skill_loss`"):
        pretrain_settings({"skill_loss": 0.3})  # a loss threshold's crossing depended on the CPU
    with pytest.raises(ConfigError, match="`pretrain.threads` must be >= 1"):
        pretrain_settings({"threads": 0})
    with pytest.raises(ConfigError, match="`pretrain.label_noise` must be < 1.0, got 1.0"):
        pretrain_settings({"label_noise": 1.0})
    with pytest.raises(ConfigError, match="`pretrain.question_loss` must be >= 0"):
        pretrain_settings({"question_loss": -0.5})
    with pytest.raises(ConfigError, match=r"pretrain.questions \(8\) must be >= pretrain.batch_size \(32\)"):
        pretrain_settings({"questions": 8})
    with pytest.raises(ConfigError, match=r"pretrain.max_skill_steps \(100\) must be >= pretrain.skill_steps \(250\)"):
        pretrain_settings({"max_skill_steps": 100})
    assert pretrain_settings({"max_skill_steps": None}).max_skill_steps is None


@pytest.mark.parametrize(
    ("step", "answer_loss", "until", "expected"),
    [
        (249, 9.0, (0.5, 800), True),  # the first skill_steps always run
        (250, 0.42, (0.5, 800), False),  # formed at the first check (AMD EPYC's run)
        (250, 1.72, (0.5, 800), True),  # not yet (the Intel Xeon's run at 250)...
        (399, 0.41, (0.5, 800), True),  # ...checked only every 50 steps...
        (400, 0.419, (0.5, 800), False),  # ...formed at 400
        (800, 1.9, (0.5, 800), False),  # never beyond the maximum
        (250, float("nan"), (0.5, 800), True),
        (250, 9.0, None, False),  # no criterion: exactly the step count
    ],
)
def test_the_skill_phase_ends_once_its_answer_loss_has_formed(step, answer_loss, until, expected) -> None:
    assert goes_on(step, answer_loss, 250, until, 50) is expected


def test_the_answer_is_where_completions_differ() -> None:
    assert _answer_position([[1, 2, 3, 4], [1, 2, 5, 4], [1, 2, 3, 4]]) == 2
    with pytest.raises(ConfigError, match="not one token each"):
        _answer_position([[1, 2, 3], [1, 2, 3, 4]])
    with pytest.raises(ConfigError, match="same answer"):
        _answer_position([[1, 2], [1, 2]])


def test_the_completion_is_one_answer_tool_call() -> None:
    from trainer.evaluation.generation import parse_answer

    assert parse_answer(completion_text("5")) == "5"
    assert completion_text("5").endswith("</tool_call><|im_end|>")


def test_held_out_questions_skip_the_models_pretraining_questions(tmp_path: Path, monkeypatch) -> None:
    training = ["t0", "t1"]
    candidates = ["t1", "p0", "h0", "p1", "h1", "h2"]

    def walk(settings, seed, size, count):
        yield from (training if seed == settings.seed else candidates)[:count]

    monkeypatch.setattr(held_out, "_walk", walk)
    (tmp_path / PRETRAINING_MANIFEST).write_text(
        json.dumps({"question_sha256": [question_digest("p0"), question_digest("p1")]})
    )
    excluded = pretraining_digests(str(tmp_path))
    assert excluded == {question_digest("p0"), question_digest("p1")}
    assert pretraining_digests("/nonexistent") == set()
    settings = ReasoningGymConfig(env_url="http://unused", seed=42, dataset_size=2)
    questions, skipped = held_out_questions(settings, seed=1042, count=3, pool=6, excluded=excluded)
    assert [(q.index, q.text) for q in questions] == [(2, "h0"), (4, "h1"), (5, "h2")]
    assert skipped == 3
    with pytest.raises(ConfigError, match="2 pre-training questions"):
        held_out_questions(settings, seed=1042, count=4, pool=6, excluded=excluded)


def test_cpu_numerics_are_pinned_before_torch_loads() -> None:
    program = (
        "import json, os, sys\n"
        "from trainer.cpu.numerics import pin_cpu_numerics\n"
        "first = pin_cpu_numerics()\n"
        "sys.modules['torch'] = object()  # as if torch had been imported\n"
        "second = pin_cpu_numerics()\n"
        "print(json.dumps([first, second, os.environ['ATEN_CPU_CAPABILITY'], os.environ['MKL_CBWR']]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == [True, False, "avx2", "AVX2"]
    assert "could be pinned" in out.stderr
    exported = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env={**env, "MKL_CBWR": "COMPATIBLE"},
        check=True,
    )
    assert json.loads(exported.stdout)[3] == "COMPATIBLE"  # what the user exported wins
