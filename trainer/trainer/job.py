"""What every training job does around TRL's trainer: the output folder, the fields it decides for
TRL's config, and the final model, plot and summary."""

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import section
from .reporting import plot_rewards, summarize
from .settings import top


def prepare_output(config: dict[str, Any], default_dir: str) -> Path:
    """Create the job's output folder; trackio's store goes beside it unless TRACKIO_DIR is set."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    output_dir = Path(top(config, "output_dir") or default_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    use_trackio_store(output_dir)
    return output_dir


def use_trackio_store(output_dir: Path) -> None:
    """trackio's store: ``TRACKIO_DIR`` if set, else ``trackio/`` beside the job's output folder (the
    dashboard's, in the stack)."""
    os.environ.setdefault("TRACKIO_DIR", str(output_dir.parent / "trackio"))


def trl_fields(config: dict[str, Any], name: str, output_dir: Path, run_name: str) -> dict[str, Any]:
    """The ``name`` section (TRL config fields) plus what the job decides: checkpoints, logging, trackio."""
    fields = section(config, name)
    fields.setdefault("logging_steps", 1)
    fields.setdefault("run_name", top(config, "run_name") or run_name)
    fields["output_dir"] = str(output_dir / "checkpoints")
    fields.setdefault("disable_tqdm", True)  # StepReporter draws the bar and prints one line per step
    report_to = fields.get("report_to", ["trackio"])
    fields["report_to"] = [report_to] if isinstance(report_to, str) else list(report_to)
    if "trackio" in fields["report_to"]:
        fields.setdefault("project", top(config, "trackio_project"))
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


def finish(
    trainer: Any,
    records: list[dict[str, Any]],
    output_dir: Path,
    title: str,
    outputs: dict[str, Path | None],
    held_out: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Save the final model (with its tokenizer), plot the rewards (and the held-out accuracy before
    and after training, if evaluated), print and write the summary."""
    final_dir = output_dir / "final"
    trainer.save_model(str(final_dir))
    points = None
    if held_out:
        mode, change = next(iter(held_out["modes"].items()))
        points = (mode, change["before"], change["after"])
    outputs = {
        "metrics": output_dir / "metrics.jsonl",
        **outputs,
        "final model": final_dir,
        "checkpoints": output_dir / "checkpoints",
        "reward plot": plot_rewards(records, output_dir / "reward.png", title, points),
        "trackio": Path(os.environ["TRACKIO_DIR"]),
    }
    text = summarize(records, outputs)
    if held_out:
        text = "\n".join([text, *held_out["lines"]])
    print(text, flush=True)
    summary = {
        "steps": len(records),
        "rewards": [r.get("reward") for r in records],
        "step_time_s": [r.get("step_time_s") for r in records],
        "held_out": held_out["modes"] if held_out else None,
        "outputs": {k: str(v) for k, v in outputs.items() if v is not None},
        "text": text,
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
