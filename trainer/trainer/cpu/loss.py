"""AsyncGRPO's objective on a plain forward: the logprobs of a row's sampled tokens and TRL's
clipped-ratio loss on them."""

from typing import Any


def token_logprobs(model: Any, rows: list[tuple[Any, Any]], temperature: float) -> list[Any]:
    """For each (input_ids, mask) row: log p(input_ids[t] | input_ids[:t]) under ``model`` at each
    position t where ``mask`` is set.

    A row is a whole OpenCode conversation (thousands of prompt tokens, mostly OpenCode's system
    prompt and tool definitions) with a few dozen sampled tokens, and the rows of a step share most
    of their prompt. That shared prefix goes through the model once; each row then continues from
    its keys and values (gradients flow back into the prefix once per row, exactly as in a
    separate forward). Only the trained positions go through the lm_head (``logits_to_keep``).
    """
    import torch
    from transformers.cache_utils import DynamicCache

    ids = [torch.as_tensor(i, dtype=torch.long) for i, _ in rows]
    positions = [torch.nonzero(torch.as_tensor(m, dtype=torch.bool))[:, 0] for _, m in rows]
    if any(len(p) and int(p[0]) == 0 for p in positions):
        raise ValueError("a row cannot train its first token (it has no context)")
    # The prefix ends before the first position whose logits any row needs.
    shared = min([len(i) for i in ids] + [int(p[0]) - 1 for p in positions if len(p)])
    for other in ids[1:]:
        same = torch.nonzero(ids[0][:shared] != other[:shared])
        shared = int(same[0, 0]) if len(same) else shared
    prefix_cache = None
    if shared > 0:
        prefix = model(input_ids=ids[0][None, :shared], use_cache=True, logits_to_keep=1).past_key_values
        prefix_cache = [(layer.keys, layer.values) for layer in prefix.layers]
    out = []
    for row_ids, row_positions in zip(ids, positions):
        # A fresh cache per row: the forward appends the row's own keys to it (by concatenation,
        # so the prefix tensors themselves stay as they are for the next row).
        cache = DynamicCache(ddp_cache_data=prefix_cache, config=model.config) if prefix_cache else None
        logits = (
            model(input_ids=row_ids[None, shared:], past_key_values=cache, logits_to_keep=row_positions - 1 - shared)
            .logits[0]
            .float()
            / temperature
        )
        out.append(torch.log_softmax(logits, dim=-1).gather(-1, row_ids[row_positions, None])[:, 0])
    return out


def clipped_ratio_loss(logps: Any, old: Any, advantage: float, epsilon_low: float, epsilon_high: float) -> Any:
    """TRL AsyncGRPO's per-token objective, summed: -min(r A, clip(r, 1-eps_low, 1+eps_high) A)."""
    import torch

    ratio = torch.exp(logps - old)
    return -torch.min(ratio * advantage, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * advantage).sum()
