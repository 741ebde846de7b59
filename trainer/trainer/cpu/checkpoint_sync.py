"""Weight sync by checkpoint (``weight_sync.mode: checkpoint``, the CPU stack): after each optimizer
step publish the policy to the shared weights volume and have the inference server reload it in
place (``inference_client``), so that the server's weight version and logprobs follow the trainer.
Optionally checks the server's logprobs against the trainer's on a probe prompt after every sync
(a silent sync failure shows up as a large gap)."""

import logging
from pathlib import Path
from typing import Any

import httpx
from inference_client import WeightSyncClient, publish_checkpoint
from transformers import TrainerCallback

from ..config import TrainerConfig
from ..training.logprob_probe import PROBE_TEXT, model_prompt_logprobs, server_prompt_logprobs

log = logging.getLogger(__name__)


class CheckpointWeightSync(TrainerCallback):
    """Publish + reload after every optimizer step (``weight_sync.mode: checkpoint``)."""

    def __init__(
        self,
        inference_url: str,
        weights_dir: Path,
        server_weights_dir: str,
        probe_ids: list[int] | None,
        served_model: str | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        self.inference_url = inference_url
        self.weights_dir = weights_dir
        self.server_weights_dir = server_weights_dir.rstrip("/")
        self.probe_ids = probe_ids
        self.served_model = served_model
        self.client = WeightSyncClient(inference_url, timeout_s=timeout_s)
        self.version: str | None = None
        self.max_logprob_gap: float | None = None

    def start(self) -> None:
        """Read the server's current weight version (and the model name it serves, if not given)."""
        self.version = self.client.weight_version()
        if self.served_model is None:
            listing = httpx.get(f"{self.inference_url.rstrip('/')}/v1/models", timeout=30).json()
            self.served_model = listing["data"][0]["id"]
        log.info(
            "weight sync: checkpoint reload into %s (serving %s, weights %s)",
            self.inference_url,
            self.served_model,
            self.version,
        )

    def publish(self, model: Any, step: int) -> str:
        """Publish ``model`` as version ``step-<step>``, have the server reload it; returns the version."""
        version = f"step-{step}"
        publish_checkpoint(model, self.weights_dir, version)
        self.version = self.client.reload(f"{self.server_weights_dir}/{version}", version)
        if self.probe_ids:
            served = server_prompt_logprobs(self.inference_url, self.served_model, self.probe_ids)
            local = model_prompt_logprobs(model, self.probe_ids)
            self.max_logprob_gap = max(abs(a - b) for a, b in zip(served, local))
            log.info("weights %s: max |server - trainer| prompt logprob gap %.2e", version, self.max_logprob_gap)
        return self.version

    def restore_if_lost(self) -> None:
        """Reload the current weights when the server no longer serves them (it restarted and came
        back with its base model), so that the rollouts after it sample the policy again."""
        from inference_client import WeightSyncError

        try:
            served = self.client.weight_version()
            if served != self.version:
                log.warning(
                    "inference serves weights %r instead of %r (restarted?): reloading them", served, self.version
                )
                self.client.reload(f"{self.server_weights_dir}/{self.version}", self.version)
        except WeightSyncError as exc:  # still down: the next unusable row asks again
            log.warning("inference server not ready for its weights yet: %s", exc)

    def close(self) -> None:
        self.client.close()

    # TRL callback hooks (the GRPO job): the methods above at TRL's events.
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.start()

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.publish(model, state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs is not None and self.max_logprob_gap is not None:
            logs["weight_sync/max_logprob_gap"] = self.max_logprob_gap

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()


def checkpoint_sync(config: TrainerConfig, tokenizer: Any) -> CheckpointWeightSync:
    """The checkpoint-reload callback the config's ``weight_sync`` and ``inference`` sections describe."""
    ws, inference = config.weight_sync, config.inference
    weights_dir = Path(ws.weights_dir)
    probe = tokenizer(PROBE_TEXT)["input_ids"] if ws.verify else None
    return CheckpointWeightSync(
        inference.url, weights_dir, ws.server_weights_dir or str(weights_dir), probe, served_model=inference.model
    )
