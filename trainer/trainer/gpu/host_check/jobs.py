"""How the check runs the trainer's jobs: the command line and the environment of each child."""

import os
import sys
from collections.abc import Sequence

from .settings import CheckSettings


def child_env(settings: CheckSettings) -> dict[str, str]:
    """This process's environment, offline (no Hub, no telemetry), with the trainer's folders in the
    work folder; on ``--device cpu`` no GPU is visible."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TRACKIO_DIR=str(settings.work / "trackio"),
        TOKENIZERS_PARALLELISM="false",
        TRL_EXPERIMENTAL_SILENCE="1",
        PYTHONUNBUFFERED="1",
    )
    if settings.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def trainer_command(settings: CheckSettings, job: str, config: str, overrides: Sequence[str]) -> list[str]:
    """``python -m trainer JOB --config CONFIG --set ...``; GRPO jobs also get the device and no
    trackio (the check reports its own figures)."""
    sets = list(overrides)
    if job == "grpo":
        sets += ["grpo.report_to=[]"]
        sets += ["grpo.use_cpu=false"] if settings.device == "cuda" else ["grpo.use_cpu=true", "grpo.bf16=false"]
    return [sys.executable, "-m", "trainer", job, "--config", config, *(a for s in sets for a in ("--set", s))]
