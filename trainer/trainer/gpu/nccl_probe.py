"""The end-of-run check of TRL's NCCL weight sync (vLLM server mode, GPU hosts): TRL sends the
weights to vLLM after every step and has no other transport, so a checkpoint reload is not a
fallback there; this probe checks that the trained weights reached the server."""

from typing import Any

from transformers import TrainerCallback

from ..config import TrainerConfig
from ..training.logprob_probe import PROBE_TEXT, model_prompt_logprobs, server_prompt_logprobs


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


def server_weights_probe(config: TrainerConfig, tokenizer: Any) -> ServerWeightsProbe | None:
    """The probe the config's ``weight_sync`` section asks for (``verify``, default on; ``tolerance``)."""
    ws, inference = config.weight_sync, config.inference
    if not ws.verify:
        return None
    return ServerWeightsProbe(
        inference.url, inference.model or config.require_model(), tokenizer(PROBE_TEXT)["input_ids"], ws.tolerance
    )
