"""OpenCode env logic that needs no sandbox: SSE accumulation, request preparation, trace shape, tasks."""

import sys

import orjson
import pytest
from opencode_env_client.models import RolloutRequest, Task, Turn
from opencode_env_server.proxy.chat_completions import Proxy, StreamAccumulator
from opencode_env_server.rollouts.trace import extends, training_trace
from openenv.core.harness.training import TrainingTrace
from pydantic import ValidationError


def sse(chunk: dict) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def turn(index: int, prompt: list[int], completion: list[int], trainable: bool = True, status: int = 200) -> Turn:
    return Turn(
        turn=index,
        request={},
        response={},
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        per_token_logps=[-0.1] * len(completion),
        finish_reason="stop",
        latency_s=0.1,
        weight_version="v1",
        stream=False,
        trainable=trainable,
        upstream_status=status,
    )


def test_stream_accumulator_rebuilds_ids_logprobs_and_tool_calls_across_split_chunks() -> None:
    stream = b"".join(
        [
            sse(
                {"model": "m", "prompt_token_ids": [1, 2, 3], "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
            ),
            sse(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {"index": 0, "id": "c1", "function": {"name": "bash", "arguments": '{"com'}}
                                ]
                            },
                            "token_ids": [10],
                            "logprobs": {"content": [{"token": "token_id:10", "logprob": -0.5}]},
                        }
                    ]
                }
            ),
            sse(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'mand": "ls"}'}}]},
                            "token_ids": [11, 12],
                            "logprobs": {"content": [{"logprob": -0.25}, {"logprob": -1.0}]},
                            "finish_reason": "tool_calls",
                        }
                    ]
                }
            ),
            sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}),
            b"data: [DONE]\n\n",
        ]
    )
    acc = StreamAccumulator()
    for i in range(0, len(stream), 7):  # network chunks split lines anywhere
        acc.feed(stream[i : i + 7])
    assert (acc.prompt_ids, acc.completion_ids, acc.logps) == ([1, 2, 3], [10, 11, 12], [-0.5, -0.25, -1.0])
    message = acc.response()["choices"][0]["message"]
    assert message["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    assert acc.response()["choices"][0]["finish_reason"] == "tool_calls"


class FakeRollout:
    upstream_url, model, sampling = "http://up", "served-model", {"temperature": 0.7}
    upstream_api_key, record_turns, top_logprobs = None, True, None

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


def test_prepare_forces_capture_fields_model_sampling_and_caps_tokens() -> None:
    body = {"model": "rlstack/policy", "messages": [], "max_tokens": 5000, "stream": True, "temperature": 0.1}
    out = Proxy(http=None).prepare(FakeRollout(), body, max_tokens=256)  # type: ignore[arg-type]
    assert out["model"] == "served-model"
    assert out["temperature"] == 0.7
    assert out["logprobs"] is True
    assert out["return_token_ids"] is True
    assert out["max_tokens"] == 256
    assert out["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5000  # the agent's request is not mutated
    # What admit_call granted is the call's max_tokens, whatever the agent asked for.
    small = Proxy(http=None).prepare(FakeRollout(), {"messages": [], "max_completion_tokens": 10}, max_tokens=7)  # type: ignore[arg-type]
    assert small["max_tokens"] == 7
    assert "max_completion_tokens" not in small
    assert "top_logprobs" not in out
    assert Proxy(http=None).prepare(FakeRollout(top_logprobs=5), body, max_tokens=8)["top_logprobs"] == 5  # type: ignore[arg-type]


def test_black_box_rollouts_are_relayed_as_sent_within_the_budget() -> None:
    body = {"messages": [], "max_tokens": 5000, "top_logprobs": 3}
    out = Proxy(http=None).prepare(FakeRollout(record_turns=False, top_logprobs=5), body, max_tokens=256)  # type: ignore[arg-type]
    assert "logprobs" not in out
    assert "return_token_ids" not in out
    assert out["top_logprobs"] == 3
    assert out["max_tokens"] == 256
    assert out["model"] == "served-model"


def test_prefix_check() -> None:
    first = turn(0, [1, 2], [3, 4])
    assert extends(None, [1, 2, 3]) is None
    assert extends(first, [1, 2, 3, 4, 5, 6]) is True
    assert extends(first, [1, 2, 3, 9, 5]) is False
    assert extends(turn(0, [], [], status=500), [1]) is None


def test_training_trace_validates_as_openenv_training_trace_with_masks() -> None:
    turns = [turn(0, [1, 2], [3, 4]), turn(1, [1, 2, 3, 4, 5], [6], trainable=False), turn(2, [], [], status=400)]
    trace = training_trace(turns, "r1")
    parsed = TrainingTrace.model_validate(trace)
    assert [t.node_id for t in parsed.turns] == ["r1:0", "r1:1"]  # failed calls carry no tokens
    assert parsed.turns[0].loss_mask == [0, 0, 1, 1]
    assert parsed.turns[1].loss_mask == [0] * 5 + [0]  # no tools: recorded, not trained


@pytest.mark.parametrize("files", [{"../x": ""}, {"/etc/passwd": ""}, {"": ""}, {"a/../../b": ""}])
def test_task_files_must_stay_in_the_work_dir(files: dict) -> None:
    with pytest.raises(ValidationError):
        Task(instruction="x", files=files)


def test_rollout_request_rejects_unknown_fields_and_bad_limits() -> None:
    with pytest.raises(ValidationError):
        RolloutRequest.model_validate({"task": {"instruction": "x"}, "agnt": "opencode"})
    with pytest.raises(ValidationError):
        RolloutRequest.model_validate({"task": {"instruction": "x", "limits": {"max_turns": 0}}})


@pytest.mark.parametrize("stream", [True, False])
def test_warm_up_reply_is_a_complete_chat_completion(stream: bool) -> None:
    from opencode_env_server.proxy.chat_completions import WARM_UP_COMPLETION, WARM_UP_TEXT, render

    rendered = render({}, WARM_UP_COMPLETION, stream)
    if stream:
        assert rendered.content_type == b"text/event-stream"
        assert rendered.body.endswith(b"data: [DONE]\n\n")
        acc = StreamAccumulator()
        acc.feed(rendered.body)
        assert acc.response()["choices"][0] == {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": WARM_UP_TEXT},
        }
        assert acc.usage == WARM_UP_COMPLETION["usage"]
    else:
        reply = orjson.loads(rendered.body)
        assert reply["choices"][0]["message"]["content"] == WARM_UP_TEXT
        assert reply["choices"][0]["finish_reason"] == "stop"


def test_agent_event_stream_is_parsed_across_chunk_boundaries() -> None:
    import asyncio

    from opencode_env_server.rollouts.agent_server import _events

    events = [
        {"type": "server.connected", "properties": {}},
        {"type": "message.updated", "properties": {"sessionID": "s", "text": "x" * 300_000}},
        {"type": "session.idle", "properties": {"sessionID": "s"}},
    ]
    wire = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)

    class Content:
        async def iter_any(self):
            for i in range(0, len(wire), 7_000):  # chunks that split lines, lines longer than any chunk
                yield wire[i : i + 7_000]

    class Response:
        content = Content()

    async def read() -> list:
        return [item async for item in _events(Response())]

    parsed = asyncio.run(read())
    assert [event for event, _ in parsed] == events
    assert [orjson.loads(raw) for _, raw in parsed] == events


def test_rollouts_take_the_most_useful_free_seat_and_spares_add_no_capacity(tmp_path) -> None:
    import asyncio

    from opencode_env_client.models import Limits
    from opencode_env_server.rollouts.manager import CapacityError, RolloutManager
    from opencode_env_server.rollouts.seats import Prepared
    from opencode_env_server.rollouts.trace import TraceStore
    from opencode_env_server.sandbox.sandbox import Sandbox
    from opencode_env_server.settings import Settings

    async def scenario() -> None:
        settings = Settings(max_concurrent_rollouts=1, agent_spares=3, sandbox_root=tmp_path / "sb")
        manager = RolloutManager(settings, TraceStore(tmp_path / "traces"))
        assert manager.seats.count == 4
        assert manager.seats.free == [0, 1, 2, 3]
        wanted, other = Limits(max_turns=2), Limits()
        never = asyncio.get_running_loop().create_future()

        def prepared(seat: int, limits: Limits, warm: bool) -> Prepared:
            # the warm-up task: done with True (warm), or still running
            task = asyncio.ensure_future(asyncio.sleep(0, True) if warm else never)
            sandbox = Sandbox(tmp_path / "sb", f"r{seat}", 20000 + seat, limits, sys.executable)
            return Prepared(f"r{seat}", f"k{seat}", seat, limits, sandbox, manager.seats.agent(sandbox, seat), task)

        manager.seats.prepared = {
            0: prepared(0, other, True),
            1: prepared(1, wanted, False),
            2: prepared(2, wanted, True),
            3: prepared(3, other, False),
        }
        await asyncio.sleep(0.01)
        assert manager.seats.warm_agents == 2
        opencode = RolloutRequest(task=Task(instruction="x", limits=wanted))
        external = RolloutRequest(task=Task(instruction="x", limits=wanted), agent="external")
        assert manager.seats.choose(opencode) == 2  # prepared with its limits and warm
        manager.seats.free.remove(2)
        assert manager.seats.choose(opencode) == 1  # with its limits, still warming
        assert manager.seats.choose(external) == 0  # needs no server: the least useful seat
        manager.by_key["busy"] = object()  # one rollout holds one of the single slot
        with pytest.raises(CapacityError):
            manager.create(opencode, "m")
        for p in manager.seats.prepared.values():
            p.ready.cancel()

    asyncio.run(scenario())


def test_rollouts_a_dead_client_never_closed_are_reaped_after_the_ttl(tmp_path) -> None:
    from types import SimpleNamespace

    from opencode_env_client.models import COMPLETED, RUNNING, STOPPED
    from opencode_env_server.rollouts.manager import RolloutManager
    from opencode_env_server.rollouts.trace import TraceStore
    from opencode_env_server.settings import Settings

    manager = RolloutManager(
        Settings(finished_rollout_ttl_s=60, sandbox_root=tmp_path / "sb"), TraceStore(tmp_path / "traces")
    )
    now = 10_000.0
    manager.rollouts = {
        "old": SimpleNamespace(id="old", status=COMPLETED, finished_at=now - 61),
        "recent": SimpleNamespace(id="recent", status=STOPPED, finished_at=now - 30),
        "running": SimpleNamespace(id="running", status=RUNNING, finished_at=None),
    }
    assert [r.id for r in manager.abandoned(now)] == ["old"]


@pytest.mark.parametrize(
    "server_versions, expected",
    [
        (["step-1", "step-1"], "step-1"),  # no reload during the call: the version that sampled it
        (["step-1", "step-2"], None),  # a reload fell between: unknown, never the stale name
    ],
)
def test_a_turn_carries_a_weight_version_only_when_no_reload_fell_within_the_call(server_versions, expected) -> None:
    import asyncio
    import time

    async def scenario() -> tuple:
        proxy = Proxy(http=None, weight_version_ttl_s=60.0)  # type: ignore[arg-type]
        answers = iter(server_versions)
        reads = []

        async def fetch(base_url: str):
            reads.append(base_url)
            return next(answers)

        proxy._fetch_version = fetch  # type: ignore[method-assign]
        before = proxy.weight_version("http://up")
        await asyncio.sleep(0.01)  # the call runs; it ends after the first read began
        version = await proxy.version_of_call("http://up", before, time.monotonic())
        # A later call ending before the second read began shares it (no third read).
        again = await proxy.version_of_call("http://up", proxy.weight_version("http://up"), time.monotonic() - 5)
        return version, again, len(reads)

    version, again, reads = asyncio.run(scenario())
    assert version == expected
    assert reads == 2
    assert again == server_versions[1]
