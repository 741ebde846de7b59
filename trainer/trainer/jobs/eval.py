"""``python -m trainer eval``: held-out evaluation of one model through the env services' clients.

A GRPO config evaluates a policy (``--model``: the base model, a checkpoint, ``final/``; default the
config's) on its held-out reasoning-gym questions; an AsyncGRPO config evaluates the model the
inference service serves on the held-out coding tasks. Both write ``eval.json`` (per-question or
per-task records and the summary) and print a table.
"""

from pathlib import Path
from typing import Any

from ..config import TrainerConfig
from ..evaluation.opencode import opencode_evaluation
from ..evaluation.reasoning_gym import generator_for, held_out_evaluation, held_out_set
from ..evaluation.report import log_held_out, table, write_report
from ..training.outputs import use_trackio_store


def run(config: TrainerConfig, model_path: str | None = None, out: Path | None = None) -> dict[str, Any]:
    """Evaluate one model (default: the config's) and write ``eval.json``; returns the report."""
    label = Path(model_path or config.require_model()).name or "model"
    path = out or Path(config.output_dir or "outputs/eval") / "eval.json"
    path.unlink(missing_ok=True)  # a failed evaluation must not leave an earlier one looking current
    use_trackio_store(path.parent)
    if config.job == "async-grpo":
        report = opencode_evaluation(config, label)
    else:
        generate = generator_for(config, model_path, config.eval.generate)
        report = held_out_evaluation(config, generate, label, held_out_set(config))
    write_report(path, [report])
    log_held_out(config.trackio_project, f"eval-{label}", [(0, report)])
    print(table([report]), flush=True)
    print(f"eval.json: {path}", flush=True)
    return report
