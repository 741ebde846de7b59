"""What every training job writes: its output folder (and trackio's store beside it), and at the end
the final model, the reward plot and the summary."""

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import TrainerConfig
from .reporting import plot_rewards, reward_delta, summarize


def prepare_output(config: TrainerConfig) -> Path:
    """Create the job's output folder (``output_dir_of``); trackio's store goes beside it unless TRACKIO_DIR is set."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    output_dir = output_dir_of(config)
    output_dir.mkdir(parents=True, exist_ok=True)
    use_trackio_store(output_dir)
    return output_dir


def output_dir_of(config: TrainerConfig) -> Path:
    """``output_dir``, default ``outputs/<job>``."""
    return Path(config.output_dir or f"outputs/{config.job}")


def use_trackio_store(output_dir: Path) -> None:
    """trackio's store: ``TRACKIO_DIR`` if set, else ``trackio/`` beside the job's output folder (the
    dashboard's, in the stack)."""
    os.environ.setdefault("TRACKIO_DIR", str(output_dir.parent / "trackio"))


def finish(
    save_model: Callable[[str], None],
    steps: int,
    records: list[dict[str, Any]],
    output_dir: Path,
    title: str,
    outputs: dict[str, Path | None],
    held_out: dict[str, Any] | None = None,
    facts: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Save the final model with ``save_model`` (with its tokenizer), plot the logged rewards (and the
    held-out accuracy before and after training, if evaluated), print and write the summary of the
    ``steps`` optimizer steps taken (``facts``: more of the job's own, into summary.json)."""
    final_dir = output_dir / "final"
    save_model(str(final_dir))
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
    text = summarize(records, outputs, steps)
    if held_out:
        text = "\n".join([text, *held_out["lines"]])
    print(text, flush=True)
    rewards = [r.get("reward") for r in records]
    summary = {
        "steps": steps,
        "rewards": rewards,
        "reward_delta": reward_delta([r for r in rewards if r is not None]),
        "step_time_s": [r.get("step_time_s") for r in records],
        "held_out": held_out["modes"] if held_out else None,
        "outputs": {k: str(v) for k, v in outputs.items() if v is not None},
        "text": text,
        **(facts or {}),
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
