"""Collect: TRL's harness rollout loop in a thread, and the rows it produces, kept only when they
are trainable on-policy data (matched to the weights that sampled them, within ``max_staleness``)."""

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from .checkpoint_sync import CheckpointWeightSync
from .versions import PolicyVersions, SampledBy

log = logging.getLogger(__name__)


@dataclass
class Row:
    """A training row from TRL's loop and the weight version that sampled each of its trained tokens."""

    sample: Any
    versions: list[str]


class RowCollector:
    """Runs TRL's ``_HarnessRolloutLoop`` (OpenCode sessions through ``opencode-env``, trace -> row
    reconciliation, group advantages) and hands out batches of trainable rows."""

    def __init__(
        self,
        loop_kwargs: dict[str, Any],
        policy_version: Any,
        versions: PolicyVersions,
        sampled_by: SampledBy,
        sync: CheckpointWeightSync,
        timeout_s: float,
        max_staleness: int,
    ) -> None:
        from multiprocessing import get_context

        from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

        self.samples: queue.Queue = queue.Queue()
        self.loop = _HarnessRolloutLoop(
            **loop_kwargs,
            rollout_buffer=self.samples,
            model_version_value=policy_version,
            heartbeat_value=get_context("spawn").Value("d", 0.0),
            failed_event=threading.Event(),
            exception_info_queue=queue.Queue(maxsize=1),
            metrics_queue=queue.Queue(maxsize=4096),
        )
        self.versions = versions
        self.sampled_by = sampled_by
        self.sync = sync
        self.deadline = time.monotonic() + timeout_s
        self.max_staleness = max_staleness
        self.dropped = 0  # rows not trainable: stale, unmatched, or sampled by weights not held
        self.unmatched = 0  # of those, rows matched to no recorded turn
        self.worker = threading.Thread(target=self.loop.run, name="harness-rollout-loop", daemon=True)

    def start(self) -> None:
        self.worker.start()

    def batch(self, step: int, size: int) -> list[Row]:
        """``size`` trainable rows for optimizer step ``step`` (1-based)."""
        rows: list[Row] = []
        while len(rows) < size:
            sample = self._next_sample()
            if not sample.completion_mask.any():
                continue  # nothing was sampled in it: nothing to train
            token_versions = self.sampled_by.versions(sample)
            unknown = token_versions is None or None in token_versions
            if unknown or any(v not in self.versions.states for v in token_versions):
                # Not matched to a recorded turn, sampled across a weight reload (version unknown),
                # or sampled by weights we do not hold (older than we keep, or the base weights of
                # a restarted server): not trainable as on-policy data.
                self.unmatched += token_versions is None
                self.dropped += 1
                if not unknown:
                    self.sync.restore_if_lost()
                continue
            if self.versions.staleness(step, token_versions) > self.max_staleness:
                self.dropped += 1
                continue
            rows.append(Row(sample, token_versions))
        return rows

    def _next_sample(self) -> Any:
        while True:
            if self.loop._failed_event.is_set():
                name, message, _ = self.loop._exception_info_queue.get_nowait()
                raise RuntimeError(f"TRL's harness rollout loop failed: {name}: {message}")
            if time.monotonic() > self.deadline or not self.worker.is_alive():
                raise TimeoutError("no training rows within collect.timeout_s (is opencode-env serving rollouts?)")
            try:
                return self.samples.get(timeout=2)
            except queue.Empty:
                continue

    def stop(self) -> None:
        """Stop TRL's loop. Rollouts still running are abandoned on purpose: their sessions are closed
        under TRL, which would log each one as a failure with a traceback."""
        logging.getLogger("trl.experimental.async_grpo.openenv_harness").setLevel(logging.CRITICAL)
        if not self.loop._loop.is_closed():
            self.loop._loop.call_soon_threadsafe(self.loop._stop_event.set)
        self.worker.join(timeout=120)
        self.sampled_by.close()
