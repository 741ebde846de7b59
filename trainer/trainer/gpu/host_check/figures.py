"""Figures from a training job's outputs: ``metrics.jsonl`` (one record per optimizer step, with the
GPU memory figures ``trainer.training.gpu_memory`` adds) and ``summary.json``."""

import json
import statistics
from pathlib import Path
from typing import Any

# Card sizes the walkthrough is sized against, as nvidia-smi shows them (GiB): A100 40 GB (40,960
# MiB) and an 80 GB card (H100: 81,559 MiB).
CARDS_GIB = {"40GB": 40.0, "80GB": 79.6}


def step_records(metrics: Path) -> list[dict[str, Any]]:
    """The per-step records of ``metrics.jsonl`` (empty when there is none)."""
    if not metrics.exists():
        return []
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


def timing(records: list[dict[str, Any]], completions_per_step: int) -> dict[str, Any]:
    """Seconds per step (the median after the first, which also warms up), the first step's seconds,
    and generated (completion) tokens per second over the steps after the first."""
    times = [float(r["step_time_s"]) for r in records]
    steady = records[1:] or records
    seconds = sum(float(r["step_time_s"]) for r in steady)
    tokens = sum(float(r.get("completions/mean_length") or 0) * completions_per_step for r in steady)
    return {
        "steps": len(records),
        "first_step_s": round(times[0], 2),
        "s_per_step": round(statistics.median(float(r["step_time_s"]) for r in steady), 2),
        "completion_tokens_per_step": round(tokens / len(steady), 1),
        "generated_tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
    }


def gpu_memory(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Peak ``max_memory_allocated`` and ``max_memory_reserved``, what the device held beside
    PyTorch's allocator (the CUDA context, libraries' workspaces), the resulting need, and whether it
    fits each card in ``CARDS_GIB`` (None: not measured, no GPU)."""
    allocated = [r["gpu_max_allocated_gib"] for r in records if r.get("gpu_max_allocated_gib") is not None]
    if not allocated:
        return {"peak_allocated_gib": None, "peak_reserved_gib": None, "need_gib": None, "fits": None}
    reserved = max(r["gpu_max_reserved_gib"] for r in records if r.get("gpu_max_reserved_gib") is not None)
    beside = max(r["gpu_used_gib"] - r["gpu_reserved_gib"] for r in records if r.get("gpu_used_gib") is not None)
    need = reserved + beside
    return {
        "peak_allocated_gib": round(max(allocated), 2),
        "peak_reserved_gib": round(reserved, 2),
        "beside_allocator_gib": round(beside, 2),
        "need_gib": round(need, 2),
        "fits": {card: need <= size for card, size in CARDS_GIB.items()},
    }


def held_out_change(summary: Path) -> dict[str, Any]:
    """Held-out accuracy before and after training per mode (``sampled``: the training temperature,
    ``greedy``), in percent, and the sampled gain in points."""
    modes = json.loads(summary.read_text()).get("held_out") or {}
    if not modes:
        raise ValueError(f"{summary} has no held-out evaluation")
    out: dict[str, Any] = {}
    for mode, change in modes.items():
        name = "greedy" if mode == "greedy" else "sampled"
        out[name] = {"mode": mode, "before": round(100 * change["before"], 1), "after": round(100 * change["after"], 1)}
    out["sampled_gain_points"] = round(out["sampled"]["after"] - out["sampled"]["before"], 1)
    return out
