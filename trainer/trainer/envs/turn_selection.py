"""Which of a rollout's model calls are trained on: the ``agent_turn_fn`` and ``train_turn_fn`` hooks.

TRL's later harness takes them (TRL 1.16 does not), so our session factory applies them to each
rollout's ``TrainingTrace`` before TRL reads it. A turn they leave out keeps its place in the trace
with a zero loss mask: it stays the context of the turns after it (their prompts extend it), and is
not trained on. The service already masks OpenCode's own calls without tools (titles, summaries).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class HarnessTurn:
    """One model call as ``train_turn_fn`` sees it (the fields of TRL's later ``HarnessTurn``)."""

    messages: list[dict[str, Any]]  # the conversation sent to the model (the prompt)
    tools: list[dict[str, Any]] | None  # the tools offered
    content: str  # the assistant's text
    tool_calls: list[dict[str, Any]]  # the tool calls it made


def harness_turn(entry: dict[str, Any]) -> HarnessTurn:
    """The ``HarnessTurn`` view of one trace entry (request and response as the proxy recorded them)."""
    request = entry.get("request") or {}
    choices = (entry.get("response") or {}).get("choices") or [{}]
    message = choices[0].get("message") or {}
    return HarnessTurn(
        messages=list(request.get("messages") or []),
        tools=request.get("tools"),
        content=message.get("content") or "",
        tool_calls=list(message.get("tool_calls") or []),
    )


def select_turns(
    trace: Any,
    agent_turn_fn: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None,
    train_turn_fn: Callable[[HarnessTurn], bool] | None,
) -> Any:
    """``trace`` (an OpenEnv ``TrainingTrace``) with the loss mask of every turn the hooks leave out zeroed."""
    entries = trace.to_trace_entries()
    kept = entries if agent_turn_fn is None else agent_turn_fn(entries)
    kept_ids = {entry["metadata"]["node_id"] for entry in kept}
    turns = []
    for turn, entry in zip(trace.turns, entries):
        trained = turn.node_id in kept_ids and (train_turn_fn is None or bool(train_turn_fn(harness_turn(entry))))
        mask = turn.loss_mask if trained else [0] * len(turn.loss_mask)
        turns.append(turn.model_copy(update={"loss_mask": mask}))
    return trace.model_copy(update={"turns": turns})


class SelectedTurnsSession:
    """A rollout session whose training trace goes through ``select_turns``; the rest is the session's."""

    def __init__(self, session: Any, agent_turn_fn: Callable | None, train_turn_fn: Callable | None) -> None:
        self.session = session
        self.agent_turn_fn = agent_turn_fn
        self.train_turn_fn = train_turn_fn

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """The session's wait."""
        return self.session.wait_for_completion(timeout_s)

    def fetch_training_trace(self) -> Any:
        """The service's training trace, the hooks' choice of turns applied."""
        return select_turns(self.session.fetch_training_trace(), self.agent_turn_fn, self.train_turn_fn)

    def verify(self, transcript: list[Any], final_state: Any = None) -> Any:
        """The session's verify."""
        return self.session.verify(transcript, final_state)

    def close(self) -> None:
        """The session's close."""
        self.session.close()
