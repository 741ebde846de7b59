"""Stage ``learning``: the CPU default GRPO job (``grpo-cpu.yaml``: its pre-trained tiny policy, 80
steps, the held-out evaluation before and after) run on this host's device. It passes when the
sampled held-out accuracy rises by at least ``--min-gain`` points."""

import time
from pathlib import Path

from .figures import held_out_change, step_records
from .jobs import child_env, trainer_command
from .policy import LEARNING_CONFIG, PolicyMaker
from .processes import run_logged
from .report import StageReport
from .settings import CheckSettings

SHORT_STEPS = 2


def run(stage: StageReport, settings: CheckSettings, env_url: str, maker: PolicyMaker) -> None:
    """Wait for the policy, train, and compare the held-out accuracy before and after."""
    deadline = time.monotonic() + stage.timeout_s
    waited = time.monotonic()
    maker.wait(maker.done, stage.timeout_s)
    stage.figures["policy_wait_s"] = round(time.monotonic() - waited, 1)
    stage.figures["policy_s"] = maker.seconds
    output = settings.work / "outputs" / "learning"
    overrides = [f"model={maker.policy}", f"output_dir={output}", f"reasoning_gym.env_url={env_url}"]
    overrides += maker.eval_overrides() + ([f"grpo.max_steps={SHORT_STEPS}"] if settings.learning == "short" else [])
    began = time.monotonic()
    run_logged(
        trainer_command(settings, "grpo", LEARNING_CONFIG, overrides),
        Path(stage.log),
        deadline - began,
        child_env(settings),
    )
    stage.figures["job_s"] = round(time.monotonic() - began, 1)
    records = step_records(output / "metrics.jsonl")
    train_s = sum(float(r["step_time_s"]) for r in records)
    change = held_out_change(output / "summary.json")
    figures = {"steps": len(records), "steps_per_s": round(len(records) / train_s, 3) if train_s else None, **change}
    gain = change["sampled_gain_points"]
    if gain < settings.min_gain:
        stage.failed(
            f"sampled held-out accuracy {gain:+.1f} points, below the +{settings.min_gain:.0f} needed", **figures
        )
    else:
        stage.passed(**figures)
