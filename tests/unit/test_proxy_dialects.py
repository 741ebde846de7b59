"""The proxy's wire dialects: Anthropic Messages and OpenAI Responses to chat completions and back.

Recorded requests (``recorded/``) are what claude-code 2.1.332 and codex 0.171.0 sent to a capture
server answering through these modules: the first call of a task, then the call after the agent ran
the scripted shell tool call. The in-process proxy tests relay through ``ProxyFastPath`` to a fake
engine and check that every dialect records the engine's ids and logprobs as one turn.
"""

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
import pytest
from aiohttp import web
from fastapi import FastAPI
from opencode_env_client.models import RUNNING, Limits, RolloutRequest, Task
from opencode_env_server.api.fast_path import ProxyFastPath
from opencode_env_server.proxy import anthropic_messages, openai_responses
from opencode_env_server.proxy.chat_completions import Proxy, refused_fields
from opencode_env_server.proxy.dialect import DialectError
from opencode_env_server.rollouts.rollout import Rollout
from opencode_env_server.rollouts.trace import TraceStore
from opencode_env_server.settings import Settings

pytestmark = pytest.mark.unit
RECORDED = Path(__file__).parent / "recorded"


def recorded(name: str) -> list[dict[str, Any]]:
    return [json.loads(line)["body"] for line in (RECORDED / name).read_text().splitlines()]


CLAUDE = recorded("claude-code-2.1.332-messages.jsonl")
CODEX = recorded("codex-0.171.0-responses.jsonl")


class SamplingRollout:
    model, record_turns, top_logprobs = "policy", True, None
    sampling = {"temperature": 1.0, "top_p": 1.0}


def forwarded(chat: dict[str, Any]) -> dict[str, Any]:
    """What goes upstream for a recorded rollout (the allow-list and the trainer's sampling applied)."""
    assert refused_fields(chat) is None
    return Proxy(None).prepare(SamplingRollout(), chat, max_tokens=64)


def test_claude_code_first_call_becomes_a_chat_request_without_its_sampling_fields() -> None:
    body = CLAUDE[0]
    chat = anthropic_messages.to_chat(body)
    upstream = forwarded(chat)
    assert upstream["messages"][0]["role"] == "system"
    assert "Claude Agent SDK" in upstream["messages"][0]["content"]
    assert [m["role"] for m in upstream["messages"][1:]] == ["user", "system"]  # claude-code's mid-list system turn
    assert upstream["messages"][1]["content"].endswith("Create hello.txt")
    names = [t["function"]["name"] for t in upstream["tools"]]
    assert "Bash" in names and "DeferredToolPlaceholder" not in names  # deferred tools are not shown
    bash = next(t["function"] for t in upstream["tools"] if t["function"]["name"] == "Bash")
    assert bash["parameters"]["properties"]["command"]["type"] == "string"
    # claude-code's thinking, effort, metadata and context management never reach the engine.
    assert {"thinking", "output_config", "metadata", "context_management"} & set(upstream) == set()
    assert (upstream["temperature"], upstream["max_tokens"], upstream["logprobs"]) == (1.0, 64, True)


def test_claude_code_tool_use_and_result_become_tool_calls_and_a_tool_message() -> None:
    messages = anthropic_messages.to_chat(CLAUDE[1])["messages"]
    call, result = messages[-2], messages[-1]
    use = CLAUDE[1]["messages"][-2]["content"][0]
    assert call["role"] == "assistant"
    assert call["tool_calls"][0]["id"] == use["id"]
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == use["input"]
    assert result == {"role": "tool", "tool_call_id": use["id"], "content": result["content"]}
    assert result["content"] == anthropic_messages.text_of(
        CLAUDE[1]["messages"][-1]["content"][0]["content"], ("text",), "x"
    )


def test_codex_calls_become_chat_requests_with_developer_turns_as_system_and_namespaces_flattened() -> None:
    first = forwarded(openai_responses.to_chat(CODEX[0]))
    assert [m["role"] for m in first["messages"]] == ["system", "system", "user", "user"]
    names = [t["function"]["name"] for t in first["tools"]]
    assert "exec_command" in names and "spawn_agent" in names  # multi_agent_v1's functions, by name
    assert {"reasoning", "include", "store", "prompt_cache_key", "client_metadata"} & set(first) == set()

    second = openai_responses.to_chat(CODEX[1])["messages"]
    call, output = CODEX[1]["input"][-2], CODEX[1]["input"][-1]
    assert second[-2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call["call_id"],
                "type": "function",
                "function": {"name": "exec_command", "arguments": call["arguments"]},
            }
        ],
    }
    assert second[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": output["output"]}


def test_a_function_call_joins_the_assistant_message_before_it() -> None:
    chat = openai_responses.to_chat(
        {
            "input": [
                {"type": "message", "role": "user", "content": "go"},
                {"type": "reasoning", "summary": [], "encrypted_content": "x"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running it."}]},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "1"},
            ]
        }
    )
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool"]
    assert chat["messages"][1]["content"] == "Running it."
    assert [c["id"] for c in chat["messages"][1]["tool_calls"]] == ["a", "b"]


@pytest.mark.parametrize(
    ("translate", "body", "message"),
    [
        (anthropic_messages.to_chat, {"messages": [], "allowed_token_ids": [1]}, "'allowed_token_ids' not relayed"),
        (anthropic_messages.to_chat, {"messages": [], "output_config": {"format": {}}}, "guided decoding"),
        (
            anthropic_messages.to_chat,
            {"messages": [], "tools": [{"type": "web_search_20250305", "name": "w"}]},
            "client tools",
        ),
        (
            anthropic_messages.to_chat,
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "'image' not supported",
        ),
        (anthropic_messages.to_chat, {"messages": "hi"}, "'messages' list"),
        (openai_responses.to_chat, {"input": "hi", "logit_bias": {"1": 5}}, "'logit_bias' not relayed"),
        (openai_responses.to_chat, {"input": "hi", "text": {"format": {"type": "json_schema"}}}, "guided decoding"),
        (openai_responses.to_chat, {"input": "hi", "previous_response_id": "resp_1"}, "stores no responses"),
        (openai_responses.to_chat, {"input": "hi", "tools": [{"type": "web_search"}]}, "only function tools"),
        (openai_responses.to_chat, {"input": [{"type": "computer_call"}]}, "'computer_call' not supported"),
        (openai_responses.to_chat, {"messages": []}, "'input' string or list"),
    ],
)
def test_requests_a_dialect_cannot_relay_are_refused_with_the_reason(translate, body, message) -> None:
    with pytest.raises(DialectError, match=message):
        translate(body)


@pytest.mark.parametrize(
    ("translate", "body"),
    [
        (anthropic_messages.to_chat, {"messages": [], "tool_choice": {"type": "any"}}),
        (anthropic_messages.to_chat, {"messages": [], "tool_choice": {"type": "tool", "name": "Bash"}}),
        (openai_responses.to_chat, {"input": "hi", "tool_choice": "required"}),
        (openai_responses.to_chat, {"input": "hi", "tool_choice": {"type": "function", "name": "f"}}),
    ],
)
def test_a_forced_tool_call_is_refused_in_every_dialect_as_in_chat(translate, body) -> None:
    assert "guided decoding" in refused_fields(translate(body))


def completion(message: dict[str, Any], finish: str = "tool_calls", stop_reason: Any = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "model": "policy",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "stop_reason": stop_reason}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


TOOL_REPLY = completion(
    {
        "role": "assistant",
        "content": "Writing it.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}
        ],
    }
)


def events(body: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name, data) of each server-sent event."""
    parsed = []
    for block in body.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        if lines.get("data") != "[DONE]":
            parsed.append((lines.get("event"), json.loads(lines["data"])))
    return parsed


def test_an_anthropic_stream_rebuilds_to_the_same_message_as_the_json_reply() -> None:
    request = {"model": "claude-x", "messages": []}
    message = orjson.loads(anthropic_messages.render(request, TOOL_REPLY, False).body)
    assert message["content"] == [
        {"type": "text", "text": "Writing it."},
        {"type": "tool_use", "id": "call_1", "name": "Bash", "input": {"command": "ls"}},
    ]
    assert (message["stop_reason"], message["model"], message["usage"]) == (
        "tool_use",
        "claude-x",
        {"input_tokens": 11, "output_tokens": 7},
    )
    stream = anthropic_messages.render(request, TOOL_REPLY, True)
    assert stream.content_type == b"text/event-stream"
    rebuilt, blocks, partial = None, [], {}
    for name, data in events(stream.body):
        assert name == data["type"]
        if name == "message_start":
            rebuilt = data["message"]
        elif name == "content_block_start":
            blocks.append(data["content_block"])
        elif name == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "message_delta":
            rebuilt.update(data["delta"])
            rebuilt["usage"].update(data["usage"])
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    assert [name for name, _ in events(stream.body)][-2:] == ["message_delta", "message_stop"]
    assert {**rebuilt, "content": blocks} == message


@pytest.mark.parametrize(
    ("finish", "stop_reason", "expected"),
    [
        ("stop", None, ("end_turn", None)),
        ("length", None, ("max_tokens", None)),
        ("stop", "\n```", ("stop_sequence", "\n```")),
    ],
)
def test_anthropic_stop_reasons(finish, stop_reason, expected) -> None:
    reply = completion({"role": "assistant", "content": "x"}, finish, stop_reason)
    message = anthropic_messages.message_of({}, reply)
    assert (message["stop_reason"], message["stop_sequence"]) == expected


def test_a_responses_stream_ends_with_the_same_response_as_the_json_reply() -> None:
    request = {"model": "gpt-x", "input": "hi", "tools": []}
    response = orjson.loads(openai_responses.render(request, TOOL_REPLY, False).body)
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][1] | {"id": None} == {
        "type": "function_call",
        "id": None,
        "call_id": "call_1",
        "name": "Bash",
        "arguments": '{"command": "ls"}',
        "status": "completed",
    }
    assert response["status"] == "completed" and response["usage"]["total_tokens"] == 18
    stream = events(openai_responses.render(request, TOOL_REPLY, True).body)
    names = [name for name, _ in stream]
    assert names[:2] == ["response.created", "response.in_progress"] and names[-1] == "response.completed"
    assert [data["sequence_number"] for _, data in stream] == list(range(len(stream)))
    done = [data["item"] for name, data in stream if name == "response.output_item.done"]
    final = stream[-1][1]["response"]
    assert done == final["output"]
    text = "".join(data["delta"] for name, data in stream if name == "response.output_text.delta")
    arguments = "".join(data["delta"] for name, data in stream if name == "response.function_call_arguments.delta")
    assert (text, arguments) == ("Writing it.", '{"command": "ls"}')


def test_a_responses_reply_cut_at_its_budget_is_incomplete() -> None:
    response = openai_responses.response_of({}, completion({"role": "assistant", "content": "x"}, "length"))
    assert (response["status"], response["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    stream = events(openai_responses.render({}, completion({"role": "assistant", "content": "x"}, "length"), True).body)
    assert stream[-1][0] == "response.incomplete"


# --- through the proxy, to a fake engine -----------------------------------------------------------
PROMPT_IDS, COMPLETION_IDS, LOGPS = [5, 6, 7, 8], [41, 42, 43], [-0.5, -0.25, -0.125]


class FakeEngine:
    """vLLM's chat completions (ids and logprobs) and ``/tokenize``, recording what it was sent."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self.complete)
        self.app.router.add_post("/tokenize", self.tokenize)

    async def complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        reply = json.loads(json.dumps(TOOL_REPLY))
        reply["prompt_token_ids"] = PROMPT_IDS
        reply["choices"][0]["token_ids"] = COMPLETION_IDS
        reply["choices"][0]["logprobs"] = {
            "content": [{"token": f"token_id:{i}", "logprob": p} for i, p in zip(COMPLETION_IDS, LOGPS)]
        }
        return web.json_response(reply)

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        return web.json_response({"count": 1234, "tokens": [], "max_model_len": 4096})


async def through_proxy(tmp_path: Path, calls: list[tuple[str, dict[str, str], dict[str, Any]]]):
    """Run ``calls`` (path, headers, body) through ProxyFastPath for one rollout; (responses, engine, rollout)."""
    engine = FakeEngine()
    runner = web.AppRunner(engine.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    settings = Settings(max_concurrent_rollouts=1, agent_prewarm=False, sandbox_root=tmp_path / "sb")
    request = RolloutRequest(
        task=Task(instruction="x", limits=Limits(max_turns=5)),
        agent="external",
        upstream_url=f"http://127.0.0.1:{port}",
    )
    rollout = Rollout(request, settings, 0, "policy", TraceStore(tmp_path / "traces"))
    rollout.status = RUNNING

    class Manager:
        def caller(self, key: str, seat: int | None):
            return (rollout, False) if key == rollout.key else (None, False)

    api = FastAPI()
    async with aiohttp.ClientSession() as http:
        api.state.manager, api.state.proxy = Manager(), Proxy(http)
        app = ProxyFastPath(api, settings)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy:8000") as client:
            responses = []
            for path, headers, body in calls:
                key = {name: value.replace("KEY", rollout.key) for name, value in headers.items()}
                responses.append(await client.post(path, headers=key, json=body))
    await runner.cleanup()
    return responses, engine, rollout


@pytest.mark.parametrize(
    ("path", "headers", "body"),
    [
        ("/v1/messages", {"x-api-key": "KEY", "anthropic-version": "2023-06-01"}, CLAUDE[1]),
        ("/v1/responses", {"authorization": "Bearer KEY"}, CODEX[1]),
        ("/v1/chat/completions", {"authorization": "Bearer KEY"}, {"messages": [{"role": "user", "content": "hi"}]}),
    ],
)
def test_every_dialect_records_the_engines_ids_and_logprobs_as_one_turn(tmp_path, path, headers, body) -> None:
    (response,), engine, rollout = asyncio.run(through_proxy(tmp_path, [(path, headers, body)]))
    assert response.status_code == 200, response.text
    sent = engine.requests[0]
    assert (sent["logprobs"], sent["return_token_ids"], sent["model"]) == (True, True, "policy")
    assert "stream" not in sent or path == "/v1/chat/completions"
    (turn,) = rollout.turns
    assert (turn.prompt_token_ids, turn.completion_token_ids, turn.per_token_logps) == (
        PROMPT_IDS,
        COMPLETION_IDS,
        LOGPS,
    )
    assert turn.request == sent  # the chat request the engine saw, in every dialect
    assert rollout.completion_tokens == len(COMPLETION_IDS)
    if path == "/v1/messages":
        names = [name for name, _ in events(response.content)]
        assert names[0] == "message_start" and names[-1] == "message_stop"  # claude-code streams
    elif path == "/v1/responses":
        assert events(response.content)[-1][1]["response"]["output"][1]["call_id"] == "call_1"


def test_count_tokens_is_the_engines_count_and_no_turn(tmp_path) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": CLAUDE[0]["tools"][:1]}
    (response,), engine, rollout = asyncio.run(
        through_proxy(tmp_path, [("/v1/messages/count_tokens", {"x-api-key": "KEY"}, body)])
    )
    assert response.json() == {"input_tokens": 1234}
    assert engine.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert engine.requests[0]["tools"][0]["function"]["name"] == CLAUDE[0]["tools"][0]["name"]
    assert rollout.turns == [] and rollout.completion_tokens == 0


def test_errors_come_back_in_the_agents_dialect_and_record_nothing(tmp_path) -> None:
    responses, engine, rollout = asyncio.run(
        through_proxy(
            tmp_path,
            [
                ("/v1/messages", {"x-api-key": "wrong"}, CLAUDE[0]),
                ("/v1/messages", {"x-api-key": "KEY"}, {**CLAUDE[0], "tool_choice": {"type": "any"}}),
                ("/v1/responses", {"authorization": "Bearer KEY"}, {"input": "hi", "top_logprobs": 20}),
                ("/v1/chat/completions", {"authorization": "Bearer KEY"}, {"messages": "hi"}),
                ("/v1/messages", {"x-api-key": "KEY"}, {**CLAUDE[0], "max_tokens": 0}),
            ],
        )
    )
    unknown, forced, refused, malformed, no_budget = responses
    assert (unknown.status_code, unknown.json()["error"]["type"]) == (401, "authentication_error")
    assert unknown.json()["type"] == "error"
    assert forced.status_code == 400 and "guided decoding" in forced.json()["error"]["message"]
    assert refused.status_code == 400 and "'top_logprobs' not relayed" in refused.json()["error"]["message"]
    # The chat request's own checks, applied to every dialect's translation alike.
    assert malformed.status_code == 400 and "'messages' list" in malformed.json()["error"]["message"]
    assert no_budget.status_code == 400 and "'max_tokens' must be a positive integer" in no_budget.text
    assert no_budget.json()["type"] == "error"
    assert engine.requests == [] and rollout.turns == []
