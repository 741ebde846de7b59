"""AsyncGRPO's token budget holds the longest conversation the inference server can produce."""

import pytest
from trainer.config import ConfigError
from trainer.gpu.token_budget import check_token_budget


@pytest.mark.parametrize("budget", [None, 0, -1, 32768, 65536])
def test_budgets_that_drop_nothing_pass(budget: int | None) -> None:
    check_token_budget(budget, 32768)


def test_a_budget_below_the_servers_max_model_len_is_refused() -> None:
    with pytest.raises(ConfigError, match="token_budget is 17408, below the inference server's max_model_len"):
        check_token_budget(17408, 32768)
