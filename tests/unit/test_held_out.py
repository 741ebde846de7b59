"""Held-out evaluation: answer parsing, intervals, paired differences and the config checks."""

import pytest
from trainer.config import ConfigError, ReasoningGymConfig, TrainerConfig
from trainer.config.loading import validate
from trainer.evaluation.generation import parse_answer
from trainer.evaluation.questions import held_out_questions
from trainer.evaluation.report import table
from trainer.evaluation.statistics import before_after_line, mean_ci, paired_difference, proportion_ci, summary_of


def test_answers_are_read_from_the_answer_tool_call_only() -> None:
    assert (
        parse_answer('<tool_call>\n{"name": "answer", "arguments": {"answer": "12"}}\n</tool_call><|im_end|>') == "12"
    )
    assert parse_answer('<tool_call>{"name": "answer", "arguments": {"answer": 7}}</tool_call>') == "7"
    assert parse_answer('<tool_call>{"name": "bash", "arguments": {"answer": "1"}}</tool_call>') is None
    assert parse_answer("the answer is 12") is None
    assert parse_answer("<tool_call>{nope}</tool_call>") is None
    assert (
        parse_answer(
            '<tool_call>{bad</tool_call> <tool_call>{"name": "answer", "arguments": {"answer": "3"}}</tool_call>'
        )
        == "3"
    )


def test_intervals() -> None:
    low, high = proportion_ci(62, 200)
    assert low < 0.31 < high
    assert high - low == pytest.approx(0.128, abs=0.005)  # Wilson, n=200
    assert proportion_ci(0, 50)[0] == pytest.approx(0.0, abs=1e-12)
    assert proportion_ci(50, 50)[1] == pytest.approx(1.0)
    assert mean_ci([1.0, 1.0]) == (1.0, 1.0, 1.0)
    assert mean_ci([0.5]) == (0.5, 0.5, 0.5)


def records(correct: list[bool]) -> list[dict]:
    return [{"index": i, "correct": c, "score": float(c), "answer": "1" if c else None} for i, c in enumerate(correct)]


def test_summary_and_paired_difference() -> None:
    before, after = records([False] * 6 + [True] * 4), records([False] * 2 + [True] * 8)
    assert summary_of(before)["accuracy"] == 0.4
    assert summary_of(before)["answered"] == 4
    diff = paired_difference(before, after)
    assert diff["points"] == pytest.approx(40.0)
    assert diff["ci_low"] < 40 < diff["ci_high"]
    line = before_after_line("T=1.0", 10, 0.4, 0.8, diff)
    assert line.startswith("held-out accuracy (T=1.0, 10 questions): 40.0% -> 80.0% (+40.0 pts, 95% CI +")
    with pytest.raises(ValueError, match="same questions"):
        paired_difference(before, after[:5])


def test_eval_settings_and_seeds_are_checked() -> None:
    config = {"seed": 42, "grpo": {"temperature": 0.7, "max_completion_length": 48}}
    ev = TrainerConfig.model_validate(config).eval
    assert (ev.seed, ev.temperature, ev.max_new_tokens, ev.generate) == (1042, 0.7, 48, "local")
    with pytest.raises(ConfigError, match="`eval.generate` must be one of local, inference"):
        validate({**config, "eval": {"generate": "remote"}}, "test")
    with pytest.raises(ConfigError, match="eval.pool"):
        validate({**config, "eval": {"num_questions": 10, "pool": 5}}, "test")
    with pytest.raises(ConfigError, match="equals a training seed"):  # refused before any connection
        held_out_questions(ReasoningGymConfig(env_url="http://127.0.0.1:9", seed=5), seed=5, count=1, pool=1)


def test_table_has_a_row_per_mode() -> None:
    report = {
        "label": "final",
        "modes": {m: {"summary": summary_of(records([True, False]))} for m in ("T=1.0", "greedy")},
    }
    rows = table([report]).splitlines()
    assert len(rows) == 3
    assert "50.0%" in rows[1]
    assert rows[2].split()[1] == "greedy"
