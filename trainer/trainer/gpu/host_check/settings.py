"""The host check's settings, parsed once from its command line."""

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

STAGES = ("install", "device", "walkthrough", "learning")
# Seconds per stage, sized so that the whole check fits in 8 minutes on one H100/H200-class GPU
# (docs/gpu.md, GPU host without Docker). ``install`` is the shell's pip install, measured, not bounded
# here; the policy for ``learning`` is made on the CPU while ``device`` and ``walkthrough`` run.
TIMEOUTS_S = {"install": 60.0, "device": 30.0, "walkthrough": 240.0, "learning": 150.0, "policy": 330.0}
# The walkthrough's optimizer steps measured by default.
WALKTHROUGH_STEPS = 10
# Stage 3 must raise the sampled held-out accuracy by this many points.
MIN_GAIN_POINTS = 15.0


@dataclass(frozen=True)
class CheckSettings:
    """What one run of the check does."""

    work: Path
    device: Literal["cuda", "cpu"]
    steps: int
    shape: Literal["qwen3-1.7b", "tiny"]
    model: str
    learning: Literal["full", "short"]
    min_gain: float
    timeouts: dict[str, float]
    site: Path | None
    install_seconds: float | None

    @property
    def logs(self) -> Path:
        return self.work / "logs"


def parse(argv: list[str] | None = None) -> CheckSettings:
    """The settings from ``argv`` (``python -m trainer.gpu.host_check --help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer.gpu.host_check",
        description="The trainer on this host's GPU, measured: device, the walkthrough's shape, learning on CUDA.",
    )
    parser.add_argument("--work", type=Path, default=Path("gpu-host-check"), help="logs, models, outputs, report.json")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the same stages on CPU (CI)")
    parser.add_argument("--steps", type=int, default=WALKTHROUGH_STEPS, help="walkthrough optimizer steps")
    parser.add_argument(
        "--shape",
        choices=("qwen3-1.7b", "tiny"),
        default="qwen3-1.7b",
        help="the random model's shape when Qwen3-1.7B is not in the HF cache (tiny: CI on CPU)",
    )
    parser.add_argument(
        "--model",
        default="auto",
        help="walkthrough model: auto (Qwen/Qwen3-1.7B from the local HF cache, else random), random, or a folder",
    )
    parser.add_argument(
        "--learning", choices=("full", "short"), default="full", help="short: a few steps and questions (CI)"
    )
    parser.add_argument("--min-gain", type=float, default=MIN_GAIN_POINTS, help="sampled held-out points to gain")
    parser.add_argument(
        "--timeout",
        action="append",
        default=[],
        metavar="STAGE=SECONDS",
        help=f"a stage's timeout ({', '.join(f'{k} {v:.0f}' for k, v in TIMEOUTS_S.items())})",
    )
    parser.add_argument("--site", type=Path, help="the folder the wheels went into (its requirements are checked)")
    parser.add_argument("--install-seconds", type=float, help="how long the wheels took to install (the shell's)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    timeouts = dict(TIMEOUTS_S)
    for item in args.timeout:
        stage, _, seconds = item.partition("=")
        if stage not in timeouts:
            parser.error(f"--timeout {item}: the stages are {', '.join(timeouts)}")
        try:
            timeouts[stage] = float(seconds)
        except ValueError:
            parser.error(f"--timeout {item}: SECONDS must be a number")
    return CheckSettings(
        work=args.work.resolve(),
        device=args.device,
        steps=args.steps,
        shape=args.shape,
        model=args.model,
        learning=args.learning,
        min_gain=args.min_gain,
        timeouts=timeouts,
        site=args.site.resolve() if args.site else None,
        install_seconds=args.install_seconds,
    )
