"""``agent_turn_fn`` and ``train_turn_fn`` applied to a rollout's training trace by our session factory."""

from openenv.core.harness import TrainableSession, TrainingTrace
from trainer.envs.turn_selection import HarnessTurn, SelectedTurnsSession, select_turns

BASH = {"type": "function", "function": {"name": "bash", "parameters": {}}}


def turn(index: int, *, tools: bool, tool_call: bool) -> dict:
    message = {"role": "assistant", "content": f"turn {index}"}
    if tool_call:
        message["tool_calls"] = [{"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]
    return {
        "node_id": f"r1:{index}",
        "prompt_token_ids": [1, 2],
        "completion_token_ids": [3, 4],
        "per_token_logps": [-0.1, -0.2],
        "loss_mask": [0, 0, 1, 1],
        "request": {"messages": [{"role": "user", "content": "task"}], **({"tools": [BASH]} if tools else {})},
        "response": {"choices": [{"message": message}]},
        "metadata": {"turn": index},
    }


TRACE = TrainingTrace.model_validate(
    {
        "turns": [
            turn(0, tools=False, tool_call=False),  # a title call
            turn(1, tools=True, tool_call=True),
            turn(2, tools=True, tool_call=False),  # the agent's last words
        ]
    }
)


def with_tools(entries: list[dict]) -> list[dict]:
    return [entry for entry in entries if entry["request"].get("tools")]


def acted(turn: HarnessTurn) -> bool:
    return bool(turn.tool_calls)


def masks(trace: TrainingTrace) -> list[list[int]]:
    return [t.loss_mask for t in trace.turns]


def test_turns_left_out_keep_their_place_with_a_zero_loss_mask() -> None:
    assert masks(select_turns(TRACE, None, None)) == masks(TRACE)
    assert masks(select_turns(TRACE, with_tools, None)) == [[0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]
    assert masks(select_turns(TRACE, None, acted)) == [[0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]]
    selected = select_turns(TRACE, with_tools, acted)
    assert masks(selected) == [[0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]]
    assert [t.completion_token_ids for t in selected.turns] == [t.completion_token_ids for t in TRACE.turns]
    TrainingTrace.model_validate(selected.model_dump())  # still a valid capture


def test_train_turn_fn_sees_the_turns_prompt_tools_and_reply() -> None:
    seen: list[HarnessTurn] = []
    select_turns(TRACE, None, lambda t: seen.append(t) or True)
    assert seen[1].messages == [{"role": "user", "content": "task"}] and seen[1].tools == [BASH]
    assert seen[1].content == "turn 1" and seen[1].tool_calls[0]["function"]["name"] == "bash"
    assert seen[0].tools is None and seen[0].tool_calls == []


class Session:
    rollout_id = "r1"

    def wait_for_completion(self, timeout_s=None) -> int:
        return 0

    def fetch_training_trace(self) -> TrainingTrace:
        return TRACE

    def verify(self, transcript, final_state=None) -> str:
        return "verified"

    def close(self) -> None:
        self.closed = True


def test_the_selecting_session_is_what_trls_worker_trains() -> None:
    session = SelectedTurnsSession(Session(), with_tools, None)
    assert isinstance(session, TrainableSession) and session.rollout_id == "r1"
    assert masks(session.fetch_training_trace())[0] == [0, 0, 0, 0]
    assert session.verify([]) == "verified"
    session.close()
    assert session.session.closed
