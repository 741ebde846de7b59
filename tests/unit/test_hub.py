"""push_to_hub fails at start, in one line, when the push could not happen at the end."""

import pytest
from trainer.config import ConfigError
from trainer.training.hub import check_hub


def test_offline_mode_and_a_missing_token_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trainer.training.hub.hub_token", lambda environ=None: (environ or {}).get("HF_TOKEN"))
    with pytest.raises(ConfigError, match="grpo.push_to_hub is set but HF_HUB_OFFLINE is on"):
        check_hub("grpo", None, {"HF_HUB_OFFLINE": "1", "HF_TOKEN": "t"})
    with pytest.raises(ConfigError, match="grpo.push_to_hub needs a Hugging Face token"):
        check_hub("grpo", None, {})


def test_an_unreachable_hub_is_one_line() -> None:
    # Nothing listens on port 9 of this host: the connection is refused at once.
    with pytest.raises(ConfigError) as caught:
        check_hub("grpo", "me/model", {"HF_TOKEN": "t", "HF_ENDPOINT": "http://127.0.0.1:9"}, timeout_s=2)
    message = str(caught.value)
    assert message.startswith(
        "grpo.push_to_hub: the Hugging Face Hub at http://127.0.0.1:9 does not answer (ConnectError"
    )
    assert "\n" not in message
