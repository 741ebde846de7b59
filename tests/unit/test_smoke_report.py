"""What `make gpu-smoke` decides its verdicts from: the facts a job's output folder holds."""

import json
from pathlib import Path

from trainer.gpu.smoke_report import NCCL_GROUP_FILE, main, report


def test_a_finished_grpo_step_with_the_weights_on_vllm(tmp_path: Path, capsys) -> None:
    (tmp_path / NCCL_GROUP_FILE).write_text(json.dumps({"server": "http://inference:8000", "group_port": 51216}))
    probe = {"gap_before_sync": 0.31, "gap_after_sync": 0.004, "tolerance": 0.02, "reached": True}
    (tmp_path / "summary.json").write_text(json.dumps({"steps": 1, "weights_probe": probe}))
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "steps=1",
        "nccl_group=formed",
        "weights_reached=true",
        "gap_before=3.10e-01",
        "gap_after=4.00e-03",
    ]


def test_a_job_that_died_before_the_group_formed(tmp_path: Path) -> None:
    assert report(tmp_path) == {"steps": 0, "nccl_group": "absent", "weights_reached": "unknown"}
    (tmp_path / "summary.json").write_text(json.dumps({"steps": 1, "weights_probe": {"reached": False}}))
    assert report(tmp_path)["weights_reached"] == "false"
