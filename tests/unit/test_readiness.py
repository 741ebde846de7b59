"""A job waits at its start for the services it needs, with a deadline and a message naming them."""

import logging

import pytest
from trainer.envs.errors import EnvUnavailable
from trainer.envs.readiness import wait_until_healthy

pytestmark = pytest.mark.unit
SERVICES = {"inference": "http://inference:8000", "opencode-env": "http://opencode-env:8000"}


class Clock:
    """A fake clock that sleeping advances."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_returns_at_once_when_everything_answers(caplog) -> None:
    clock = Clock()
    with caplog.at_level(logging.INFO):
        wait_until_healthy(SERVICES, 60, healthy=lambda url: True, clock=clock, sleep=clock.sleep)
    assert clock.now == 0.0
    assert "waiting" not in caplog.text


def test_waits_for_a_service_that_comes_up_later(caplog) -> None:
    clock = Clock()
    up_at = {"http://inference:8000": 30.0, "http://opencode-env:8000": 0.0}
    with caplog.at_level(logging.INFO):
        wait_until_healthy(SERVICES, 60, healthy=lambda url: clock.now >= up_at[url], clock=clock, sleep=clock.sleep)
    assert 30.0 <= clock.now <= 32.0
    assert "waiting up to 60 s for inference (http://inference:8000)" in caplog.text
    assert "opencode-env (" not in caplog.text.split("\n")[0]
    assert "healthy after 30 s" in caplog.text


def test_names_what_stayed_down_after_the_deadline() -> None:
    clock = Clock()
    with pytest.raises(
        EnvUnavailable, match=r"opencode-env at http://opencode-env:8000 did not answer /health within 60 s"
    ) as error:
        wait_until_healthy(SERVICES, 60, healthy=lambda url: "inference" in url, clock=clock, sleep=clock.sleep)
    assert "inference at" not in str(error.value)
    assert "docker compose logs opencode-env" in str(error.value)
