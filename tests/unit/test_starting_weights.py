"""A "before" evaluation on the inference service scores the weights training starts from."""

import pytest
from trainer.training.starting_weights import serve_starting_weights


class Events(list):
    def __getattr__(self, name: str):
        return lambda *args: self.append((name, *args))


class FakeTrainer:
    def __init__(self, events: Events) -> None:
        self.model = "model"
        self.vllm_generation = events


def test_vllm_server_mode_syncs_before_the_first_step() -> None:
    events = Events()
    serve_starting_weights("nccl", FakeTrainer(events), None)
    assert events == [("sync_weights",)]


def test_checkpoint_mode_publishes_the_starting_weights_as_step_0() -> None:
    events = Events()
    serve_starting_weights("checkpoint", FakeTrainer(Events()), events)
    assert events == [("start",), ("publish", "model", 0)]


def test_a_mode_that_never_updates_the_server_is_refused() -> None:
    with pytest.raises(ValueError, match="never updates"):
        serve_starting_weights("none", FakeTrainer(Events()), None)
