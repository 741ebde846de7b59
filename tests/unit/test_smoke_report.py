"""What `make gpu-smoke` decides its verdicts from: the facts a job's output folder holds, and what
the weight-sync probe's two gaps prove."""

import json
from pathlib import Path

import pytest
from trainer.gpu.smoke_report import NCCL_GROUP_FILE, main, report
from trainer.training.logprob_probe import sync_verdict


def test_a_finished_grpo_step_with_the_weights_on_vllm(tmp_path: Path, capsys) -> None:
    (tmp_path / NCCL_GROUP_FILE).write_text(json.dumps({"server": "http://inference:8000", "group_port": 51216}))
    probe = sync_verdict(0.31, 0.004, tolerance=0.02, min_movement=0.1)
    (tmp_path / "summary.json").write_text(json.dumps({"steps": 1, "weights_probe": probe}))
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "frac_reward_zero_std": 0.25}) + "\n")
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "steps=1",
        "nccl_group=formed",
        "weights_reached=true",
        "weights_moved=true",
        "gap_before=3.10e-01",
        "gap_after=4.00e-03",
        "zero_std_groups=0.25",
    ]


def test_a_job_that_died_before_the_group_formed(tmp_path: Path) -> None:
    assert report(tmp_path) == {"steps": 0, "nccl_group": "absent", "weights_reached": "unknown"}
    (tmp_path / "summary.json").write_text(json.dumps({"steps": 1, "weights_probe": {"reached": False}}))
    assert report(tmp_path)["weights_reached"] == "false"


@pytest.mark.parametrize(
    ("before", "after", "moved", "arrived"),
    [
        (0.31, 0.004, True, True),  # the step moved the weights and the sync carried the move
        (0.001, 0.001, False, True),  # a zero-gradient step: both gaps small, nothing proven
        (0.0, 0.0, False, True),
        (0.31, 0.30, True, False),  # the sync carried nothing
        (0.05, 0.05, False, False),
    ],
)
def test_the_sync_is_proven_only_when_the_weights_moved_and_then_arrived(
    before: float, after: float, moved: bool, arrived: bool
) -> None:
    result = sync_verdict(before, after, tolerance=0.02, min_movement=0.1)
    assert (result["moved"], result["arrived"], result["reached"]) == (moved, arrived, moved and arrived)
    assert result["verdict"].startswith(
        "weights reached" if moved and arrived else ("NOT PROVEN" if arrived else "MISMATCH")
    )
