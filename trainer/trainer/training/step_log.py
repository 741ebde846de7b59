"""The training-loop side of reporting: one line and one JSONL record per optimizer step, under a
progress bar."""

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm
from transformers import TrainerCallback

from .gpu_memory import gpu_memory
from .reporting import format_step


class StepReporter(TrainerCallback):
    """One log line and one JSONL record per optimizer step, under a progress bar; on CUDA the
    record also holds the GPU memory figures (``gpu_memory``).

    ``weight_version`` (optional) returns the inference server's weight version for the line.
    """

    def __init__(self, metrics_path: Path, weight_version: Callable[[], str | None] | None = None) -> None:
        self.metrics_path = metrics_path
        self.weight_version = weight_version
        self.records: list[dict[str, Any]] = []
        self._bar: tqdm | None = None
        self._last_time = time.monotonic()
        self._last_tokens: float | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
        self.metrics_path.write_text("")
        self._bar = tqdm(total=state.max_steps, desc="training", unit="step", dynamic_ncols=True)
        self._last_time = time.monotonic()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        logs = logs or {}
        if "loss" not in logs and "reward" not in logs:
            return  # the end-of-training summary log, evaluation logs
        now = time.monotonic()
        record: dict[str, Any] = {"step": state.global_step, "time": time.time(), **logs}
        record["step_time_s"] = logs.get("step_time", now - self._last_time)
        tokens = logs.get("num_tokens")
        if tokens is not None and self._last_tokens is not None and now > self._last_time:
            record["tokens_per_s"] = (tokens - self._last_tokens) / (now - self._last_time)
        self._last_tokens, self._last_time = tokens, now
        record.update(gpu_memory())
        if self.weight_version is not None:
            record["weight_version"] = self.weight_version()
        self.records.append(record)
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        if self._bar is not None:
            self._bar.update(state.global_step - self._bar.n)
            self._bar.write(format_step(state.global_step, state.max_steps, record))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._bar is not None:
            self._bar.close()
