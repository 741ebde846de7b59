"""The inference service's weights at the start of a GRPO run, for a "before" held-out evaluation
generated there (``eval.generate: inference``).

TRL's vLLM server mode first sends the weights at step 1, and the checkpoint reload publishes after
each optimizer step: until then the server holds whatever it loaded last, the base model or another
run's final policy. The "before" figure would then score those weights, not the ones training
starts from."""

from typing import Any


def serve_starting_weights(mode: str, trainer: Any, sync: Any | None) -> None:
    """Make the inference service hold ``trainer``'s current weights (``mode``: ``weight_sync.mode``;
    ``sync``: the checkpoint callback in ``checkpoint`` mode)."""
    if mode == "nccl":
        trainer.vllm_generation.sync_weights()
    elif mode == "checkpoint":
        sync.start()
        sync.publish(trainer.model, 0)
    else:
        raise ValueError(f"weight_sync.mode {mode!r} never updates the inference service's weights")
