"""CPU weight sync: after each optimizer step publish the policy to the shared weights volume and
have the inference server reload it in place (``inference_client``), so that the server's weight
version and logprobs follow the trainer. Optionally checks the server's logprobs against the
trainer's on a probe prompt after every sync (a silent sync failure shows up as a large gap).

In TRL's vLLM server mode (GPU hosts) TRL itself sends the weights over NCCL after every step; it
has no other transport, so a checkpoint reload is not a fallback there. ``ServerWeightsProbe``
checks at the end of such a run that the weights reached the server.
"""

import logging
from pathlib import Path
from typing import Any

import httpx
from inference_client import WeightSyncClient, publish_checkpoint
from transformers import TrainerCallback

log = logging.getLogger("trainer.weight_sync")

PROBE_TEXT = "The quick brown fox jumps over the lazy dog. 12 + 30 = 42."


def server_prompt_logprobs(base_url: str, model: str, token_ids: list[int], timeout_s: float = 60.0) -> list[float]:
    """Logprob the server assigns to each prompt token after the first (vLLM ``prompt_logprobs``)."""
    response = httpx.post(
        f"{base_url.rstrip('/')}/v1/completions",
        timeout=timeout_s,
        json={"model": model, "prompt": token_ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0},
    )
    response.raise_for_status()
    positions = response.json()["choices"][0]["prompt_logprobs"]
    logprobs = []
    for token_id, candidates in zip(token_ids[1:], positions[1:]):
        entry = candidates.get(str(token_id)) or candidates.get(f"token_id:{token_id}")
        if entry is None:
            raise ValueError(f"server returned no logprob for prompt token {token_id}")
        logprobs.append(float(entry["logprob"]))
    return logprobs


def model_prompt_logprobs(model: Any, token_ids: list[int]) -> list[float]:
    """The same logprobs from the trainer's model."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ids = torch.tensor([token_ids], device=model.device)
            logits = model(input_ids=ids).logits.float()
            logps = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
    finally:
        model.train(was_training)
    return logps.tolist()


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

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
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

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        version = f"step-{state.global_step}"
        publish_checkpoint(model, self.weights_dir, version)
        self.version = self.client.reload(f"{self.server_weights_dir}/{version}", version)
        if self.probe_ids:
            served = server_prompt_logprobs(self.inference_url, self.served_model, self.probe_ids)
            local = model_prompt_logprobs(model, self.probe_ids)
            self.max_logprob_gap = max(abs(a - b) for a, b in zip(served, local))
            log.info("weights %s: max |server - trainer| prompt logprob gap %.2e", version, self.max_logprob_gap)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs is not None and self.max_logprob_gap is not None:
            logs["weight_sync/max_logprob_gap"] = self.max_logprob_gap

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.client.close()


class ServerWeightsProbe(TrainerCallback):
    """vLLM server mode (TRL's NCCL sync): at the end of training, check that the trained weights
    reach the server.

    TRL syncs before each step's generation, so after the last step the server still holds the
    weights that step started from. The probe measures the largest gap between the server's and the
    trainer's prompt logprobs on a fixed text, syncs once more through TRL, and measures again: the
    weights arrived when the gap after the sync is within ``tolerance``. The check is conclusive for
    the last sync when the gap before it was larger (``make gpu-smoke`` takes one large step for
    that); over a long run, a sync that never worked leaves a large gap either way. ``trainer`` is
    set once TRL's trainer exists.
    """

    def __init__(self, inference_url: str, served_model: str, probe_ids: list[int], tolerance: float) -> None:
        self.inference_url = inference_url
        self.served_model = served_model
        self.probe_ids = probe_ids
        self.tolerance = tolerance
        self.trainer: Any = None
        self.result: dict[str, Any] | None = None

    def _gap(self, model: Any) -> float:
        served = server_prompt_logprobs(self.inference_url, self.served_model, self.probe_ids)
        local = model_prompt_logprobs(model, self.probe_ids)
        return max(abs(a - b) for a, b in zip(served, local))

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        before = self._gap(model)
        self.trainer.vllm_generation.sync_weights()
        after = self._gap(model)
        reached = after <= self.tolerance
        self.result = {
            "gap_before_sync": before,
            "gap_after_sync": after,
            "tolerance": self.tolerance,
            "reached": reached,
        }
        if not reached:
            verdict = (
                f"MISMATCH: the server's logprobs do not follow the trainer's (tolerance {self.tolerance:g}; "
                "a float32 trainer against a bfloat16 server differs by ~0.1: see GPU_INFERENCE_DTYPE)"
            )
        elif before > self.tolerance:
            verdict = "weights reached vLLM (the final step had moved them by more than the tolerance)"
        else:
            verdict = "weights reached vLLM (the final step moved them by less than the tolerance)"
        print(
            f"weight sync: probe prompt logprobs, max |vLLM - trainer| {before:.2e} before the final sync, "
            f"{after:.2e} after: {verdict}",
            flush=True,
        )
