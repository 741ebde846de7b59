"""The end-of-run check of TRL's NCCL weight sync (vLLM server mode, GPU hosts): TRL sends the
weights to vLLM after every step and has no other transport, so a checkpoint reload is not a
fallback there; this probe checks that the trained weights reached the server."""

from typing import Any

from transformers import TrainerCallback

from ..config import TrainerConfig
from ..training.logprob_probe import PROBE_TEXT, model_prompt_logprobs, server_prompt_logprobs, sync_verdict


class ServerWeightsProbe(TrainerCallback):
    """vLLM server mode (TRL's NCCL sync): at the end of training, check that the trained weights
    reach the server.

    TRL syncs before each step's generation, so after the last step the server still holds the
    weights that step started from. The probe measures the largest gap between the server's and the
    trainer's prompt logprobs on a fixed text, syncs once more through TRL, and measures again. The
    sync is proven only when both hold: the last step moved the weights (the gap before the sync is
    above ``min_movement``) and they arrived (the gap after it is within ``tolerance``). A step that
    moved nothing (every group's rewards equal, a zero learning rate) proves nothing, and says so.
    ``trainer`` is set once TRL's trainer exists.
    """

    def __init__(
        self,
        inference_url: str,
        served_model: str,
        served_dtype: str | None,
        probe_ids: list[int],
        tolerance: float,
        min_movement: float,
    ) -> None:
        self.inference_url = inference_url
        self.served_model = served_model
        self.served_dtype = served_dtype
        self.probe_ids = probe_ids
        self.tolerance = tolerance
        self.min_movement = min_movement
        self.trainer: Any = None
        self.result: dict[str, Any] | None = None

    def _gap(self, model: Any) -> float:
        served = server_prompt_logprobs(self.inference_url, self.served_model, self.probe_ids)
        local = model_prompt_logprobs(model, self.probe_ids, self.served_dtype)
        return max(abs(a - b) for a, b in zip(served, local))

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        before = self._gap(model)
        self.trainer.vllm_generation.sync_weights()
        after = self._gap(model)
        self.result = sync_verdict(before, after, self.tolerance, self.min_movement)
        print(
            f"weight sync: probe prompt logprobs, max |vLLM - trainer| {before:.2e} before the final sync, "
            f"{after:.2e} after: {self.result['verdict']}",
            flush=True,
        )


def server_weights_probe(config: TrainerConfig, tokenizer: Any) -> ServerWeightsProbe | None:
    """The probe the config's ``weight_sync`` section asks for (``verify``, default on; ``tolerance``,
    ``min_movement``), comparing in ``inference.dtype``."""
    ws, inference = config.weight_sync, config.inference
    if not ws.verify:
        return None
    return ServerWeightsProbe(
        inference.url,
        inference.model or config.require_model(),
        inference.dtype,
        tokenizer(PROBE_TEXT)["input_ids"],
        ws.tolerance,
        ws.min_movement,
    )
