"""The fields of TRL's config classes that every job decides the same way, and building those
classes as on a CUDA host (for ``--dry-run`` on any machine)."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import TrainerConfig


def trl_fields(config: TrainerConfig, output_dir: Path) -> dict[str, Any]:
    """The job's TRL section plus what the job decides: checkpoints, logging, trackio."""
    fields = config.training_fields()
    fields.setdefault("logging_steps", 1)
    fields.setdefault("run_name", config.run_name or config.job)
    fields["output_dir"] = str(output_dir / "checkpoints")
    fields.setdefault("disable_tqdm", True)  # StepReporter draws the bar and prints one line per step
    report_to = fields.get("report_to", ["trackio"])
    fields["report_to"] = [report_to] if isinstance(report_to, str) else list(report_to)
    if "trackio" in fields["report_to"]:
        fields.setdefault("project", config.trackio_project)
    return fields


def as_on_cuda_host(build: Callable[..., Any], *args: Any) -> Any:
    """``build(*args)`` (a TRL config constructor) as it runs on a CUDA host, also where there is no
    GPU: transformers' check that bf16 is available on the GPU is the one part of the validation
    that needs the device, and is answered yes. For ``--dry-run`` only."""
    import transformers.training_args as training_args

    real = training_args.is_torch_bf16_gpu_available
    training_args.is_torch_bf16_gpu_available = lambda: True
    try:
        return build(*args)
    finally:
        training_args.is_torch_bf16_gpu_available = real


def first_step_learning_rate(args: Any) -> float | None:
    """The learning rate TRL's scheduler gives the first optimizer step of ``args`` (a TRL config):
    0 when warm-up covers it, as ``warmup_steps: 10`` does for a one-step run (None: a run sized by
    epochs, whose step count depends on the data)."""
    if args.max_steps <= 0:
        return None
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=args.learning_rate)
    scheduler = get_scheduler(
        args.lr_scheduler_type,
        optimizer=optimizer,
        num_warmup_steps=args.get_warmup_steps(args.max_steps),
        num_training_steps=args.max_steps,
        scheduler_specific_kwargs=args.lr_scheduler_kwargs,
    )
    return float(scheduler.get_last_lr()[0])
