"""AsyncGRPO's ``token_budget`` against what a sample can be in harness mode.

TRL drops a sample longer than ``token_budget`` (with a warning) and, left unset, sets it to the
vLLM server's ``max_model_len``. With OpenCode a sample is not one completion but the whole
conversation (prompt, every turn, every tool result), which can be as long as the server allows:
a budget below ``max_model_len`` silently drops the long conversations, and a step then trains on
the few short ones left."""

import httpx

from ..config import ConfigError


def served_max_model_len(inference_url: str, timeout_s: float = 30.0) -> int | None:
    """The ``max_model_len`` the vLLM server reports for its model (None when it reports none)."""
    response = httpx.get(f"{inference_url.rstrip('/')}/v1/models", timeout=timeout_s)
    response.raise_for_status()
    lengths = [m.get("max_model_len") for m in response.json().get("data", []) if m.get("max_model_len")]
    return int(lengths[0]) if lengths else None


def check_token_budget(token_budget: int | None, max_model_len: int | None) -> None:
    """Refuse a budget that would drop conversations the server can produce (None or <= 0: TRL's
    default or no budgeting, both fine)."""
    if token_budget is None or token_budget <= 0 or max_model_len is None:
        return
    if token_budget < max_model_len:
        raise ConfigError(
            f"async_grpo.token_budget is {token_budget}, below the inference server's max_model_len "
            f"({max_model_len}): a harness sample is a whole OpenCode conversation, up to {max_model_len} tokens, "
            "and TRL drops longer ones; remove token_budget (TRL then uses max_model_len) or raise it"
        )
