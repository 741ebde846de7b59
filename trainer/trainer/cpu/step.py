"""Step: one optimizer step of AsyncGRPO's objective on a batch of rows, with the check that the
logprobs recomputed under the sampling weights match the ones vLLM recorded."""

from dataclasses import dataclass
from typing import Any

from .collect import Row
from .loss import clipped_ratio_loss, token_logprobs
from .versions import PolicyVersions


@dataclass
class StepResult:
    """What one optimizer step measured."""

    loss: float  # per trained token
    tokens: int
    grad_norm: float
    logprob_max_diff: float
    staleness: list[int]


def optimizer_step(
    model: Any, optimizer: Any, rows: list[Row], versions: PolicyVersions, current: str, step: int, args: Any
) -> StepResult:
    """Backpropagate the token-sum-normalised clipped-ratio loss of ``rows`` and step ``optimizer``.

    ``current`` is the version of ``model``'s weights (rows it sampled are checked against its own
    forward; older rows against the weights that sampled them)."""
    import torch

    eps_low = args.epsilon
    eps_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    tokens = sum(int(row.sample.completion_mask.sum()) for row in rows)
    optimizer.zero_grad()
    masks = [torch.as_tensor(row.sample.completion_mask, dtype=torch.bool) for row in rows]
    all_logps = token_logprobs(model, [(row.sample.input_ids, m) for row, m in zip(rows, masks)], args.temperature)
    total, loss_sum, diffs = 0.0, 0.0, []
    for row, mask, logps in zip(rows, masks, all_logps):
        old = torch.as_tensor(row.sample.old_log_probs, dtype=torch.float32)
        if set(row.versions) == {current}:  # sampled by the weights being trained
            diffs.append(float((logps.detach() - old[mask]).abs().max()))
        else:
            diffs.append(_logprob_diff(versions, row, mask, old, args.temperature))
        loss = clipped_ratio_loss(logps, old[mask], float(row.sample.advantage), eps_low, eps_high)
        total = total + loss
        loss_sum += float(loss.detach())
    (total / max(tokens, 1)).backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm))
    optimizer.step()
    return StepResult(
        loss=loss_sum / max(tokens, 1),
        tokens=tokens,
        grad_norm=grad_norm,
        logprob_max_diff=max(diffs),
        staleness=[versions.staleness(step, row.versions) for row in rows],
    )


def _logprob_diff(versions: PolicyVersions, row: Row, mask: Any, old: Any, temperature: float) -> float:
    """Largest |logprob under the sampling weights - logprob the proxy recorded| over the row's trained tokens."""
    import torch

    recomputed = torch.empty(int(mask.sum()))
    for name in set(row.versions):
        with torch.no_grad():
            logps = token_logprobs(versions.model(name), [(row.sample.input_ids, mask)], temperature)[0]
        chosen = torch.tensor([v == name for v in row.versions])
        recomputed[chosen] = logps[chosen]
    return float((recomputed - old[mask]).abs().max())
