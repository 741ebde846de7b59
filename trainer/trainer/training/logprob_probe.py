"""The check that the inference server holds the trainer's weights: the logprobs both assign to the
tokens of a fixed probe text, whose largest difference is small only when the weights match."""

from typing import Any

import httpx

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


def model_prompt_logprobs(model: Any, token_ids: list[int], dtype: str | None = None) -> list[float]:
    """The same logprobs from the trainer's model (``dtype``: computed under autocast to it, as a
    16-bit server computes them; None or float32: in the model's own dtype)."""
    import contextlib

    import torch

    was_training = model.training
    model.eval()
    autocast = (
        torch.autocast(model.device.type, dtype=getattr(torch, dtype))
        if dtype not in (None, "float32")
        else contextlib.nullcontext()
    )
    try:
        with torch.no_grad(), autocast:
            ids = torch.tensor([token_ids], device=model.device)
            logits = model(input_ids=ids).logits.float()
            logps = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
    finally:
        model.train(was_training)
    return logps.tolist()


def sync_verdict(before: float, after: float, tolerance: float, min_movement: float) -> dict[str, Any]:
    """What the probe's two gaps prove: ``reached`` only when the weights moved and then arrived."""
    moved, arrived = before > min_movement, after <= tolerance
    if not arrived:
        verdict = (
            f"MISMATCH: the server's logprobs do not follow the trainer's (tolerance {tolerance:g}; a server "
            "serving another dtype than the trainer computes in differs by ~0.1: see GPU_INFERENCE_DTYPE)"
        )
    elif not moved:
        verdict = (
            f"NOT PROVEN: the last step moved the probe's logprobs by {before:.2e}, not more than {min_movement:g} "
            "(a zero gradient or learning rate), so the sync had nothing to carry"
        )
    else:
        verdict = "weights reached vLLM (the last step had moved them, and the sync carried the move)"
    return {
        "gap_before_sync": before,
        "gap_after_sync": after,
        "tolerance": tolerance,
        "min_movement": min_movement,
        "moved": moved,
        "arrived": arrived,
        "reached": moved and arrived,
        "verdict": verdict,
    }
