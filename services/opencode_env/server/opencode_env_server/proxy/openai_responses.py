"""OpenAI Responses (``POST /v1/responses``) to chat completions and back.

codex speaks it. ``instructions`` becomes a system message; ``input`` items become chat messages in
order (``message`` items by role, ``developer`` as system; ``function_call`` items the assistant's
``tool_calls``, joined to the assistant message before them; ``function_call_output`` items ``tool``
messages; ``reasoning`` items are the model's earlier thinking and are dropped, as chat templates drop
it from past turns). Function tools become chat functions; other tool types are refused, as are
structured outputs (``text.format`` other than text: guided decoding) and ``previous_response_id``
(the proxy keeps no responses). Sampling fields (``temperature``, ``top_p``, ``reasoning``) are
dropped like any agent's; bookkeeping fields are ignored; any other field is refused. The reply is a
``response`` object, or its event stream (``response.created`` ... ``response.completed``).
"""

import secrets
import time
from typing import Any

import orjson

from . import chat_completions, dialect

TRANSLATED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
        "text",
    }
)
SAMPLING = frozenset({"temperature", "top_p", "reasoning"})
# Bookkeeping that changes nothing the engine samples (the proxy stores no responses).
IGNORED = frozenset(
    {"store", "include", "prompt_cache_key", "metadata", "user", "service_tier", "truncation", "client_metadata"}
)
TEXT_PARTS = ("input_text", "output_text", "text")
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request of a Responses request (raises ``dialect.DialectError``)."""
    if not isinstance(body, dict) or not isinstance(body.get("input"), (str, list)):
        raise dialect.DialectError("the body must be a JSON object with an 'input' string or list")
    dialect.refuse_unknown(body, TRANSLATED | IGNORED | {"previous_response_id"}, SAMPLING)
    if body.get("previous_response_id"):
        raise dialect.DialectError(
            "'previous_response_id' not supported: the proxy stores no responses; send the whole input"
        )
    text_format = ((body.get("text") or {}).get("format") or {}).get("type", "text")
    if text_format != "text":
        raise dialect.DialectError(
            f"text.format {text_format!r} not relayed: structured output is sampled under guided decoding"
        )
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = (
        [{"type": "message", "role": "user", "content": body["input"]}]
        if isinstance(body["input"], str)
        else body["input"]
    )
    for index, item in enumerate(items):
        _add_item(messages, item, f"input[{index}]")
    chat: dict[str, Any] = {"messages": messages, "model": body.get("model")}
    chat.update({name: body[name] for name in ("temperature", "top_p") if name in body})
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("tools"):
        tools = dialect.list_at(body["tools"], "tools")
        chat["tools"] = [function for i, tool in enumerate(tools) for function in _functions(tool, f"tools[{i}]")]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("parallel_tool_calls") is not None:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    return chat


def _add_item(messages: list[dict[str, Any]], item: Any, where: str) -> None:
    kind = item.get("type", "message") if isinstance(item, dict) else None
    if kind == "message":
        role = ROLES.get(item.get("role"))
        if role is None:
            raise dialect.DialectError(f"{where}: a message needs role user, assistant, system or developer")
        messages.append({"role": role, "content": dialect.text_of(item.get("content"), TEXT_PARTS, where)})
    elif kind == "function_call":
        call = {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
        }
        # One assistant turn (its text, then its calls) as the engine sampled it.
        if messages and messages[-1]["role"] == "assistant":
            messages[-1].setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        messages.append(
            {"role": "tool", "tool_call_id": item.get("call_id"), "content": dialect.text_of(output, TEXT_PARTS, where)}
        )
    elif kind == "reasoning":
        return
    else:
        raise dialect.DialectError(f"{where}: input item of type {kind!r} not supported")


def _functions(tool: Any, where: str) -> list[dict[str, Any]]:
    """The chat functions of a tool: itself, or the functions of a ``namespace`` (codex groups its
    sub-agent tools so), each called by its own name."""
    if isinstance(tool, dict) and tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
        return [_tool(inner, f"{where}.tools[{i}]") for i, inner in enumerate(tool["tools"])]
    return [_tool(tool, where)]


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise dialect.DialectError(f"{where}: only function tools are relayed, not {kind!r}")
    return dialect.chat_function(tool["name"], tool.get("description"), tool.get("parameters"))


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise dialect.DialectError(f"tool_choice {choice!r} not supported")


def response_of(request: dict[str, Any], completion: dict[str, Any]) -> dict[str, Any]:
    """The ``response`` object of an engine reply."""
    message, finish, _ = dialect.chat_message(completion)
    output: list[dict[str, Any]] = []
    if message.get("content"):
        part = {"type": "output_text", "text": message["content"], "annotations": []}
        output.append(
            {
                "type": "message",
                "id": f"msg_{secrets.token_hex(12)}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{secrets.token_hex(12)}",
                "call_id": call.get("id") or f"call_{secrets.token_hex(12)}",
                "name": function.get("name"),
                "arguments": function.get("arguments") or "",
                "status": "completed",
            }
        )
    prompt_tokens, completion_tokens = dialect.usage_of(completion)
    cut = finish == "length"
    return {
        "id": f"resp_{secrets.token_hex(12)}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": request.get("model") or completion.get("model"),
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def render(request: dict[str, Any], completion: dict[str, Any], stream: bool) -> dialect.Rendered:
    """The reply: the response as JSON, or as the Responses event stream."""
    response = response_of(request, completion)
    if not stream:
        return dialect.Rendered(orjson.dumps(response))
    events: list[tuple[str, dict[str, Any]]] = []
    pending = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    events.append(("response.created", {"response": pending}))
    events.append(("response.in_progress", {"response": pending}))
    for index, item in enumerate(response["output"]):
        events += _item_events(index, item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append((final, {"response": response}))
    return dialect.Rendered(
        b"".join(
            dialect.sse(name, {"type": name, "sequence_number": n, **data}) for n, (name, data) in enumerate(events)
        ),
        b"text/event-stream",
    )


def _item_events(index: int, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    at = {"output_index": index}
    if item["type"] == "function_call":
        return [
            ("response.output_item.added", {**at, "item": {**item, "arguments": "", "status": "in_progress"}}),
            ("response.function_call_arguments.delta", {**at, "item_id": item["id"], "delta": item["arguments"]}),
            ("response.function_call_arguments.done", {**at, "item_id": item["id"], "arguments": item["arguments"]}),
            ("response.output_item.done", {**at, "item": item}),
        ]
    part = item["content"][0]
    where = {**at, "item_id": item["id"], "content_index": 0}
    return [
        ("response.output_item.added", {**at, "item": {**item, "content": [], "status": "in_progress"}}),
        ("response.content_part.added", {**where, "part": {**part, "text": ""}}),
        ("response.output_text.delta", {**where, "delta": part["text"]}),
        ("response.output_text.done", {**where, "text": part["text"]}),
        ("response.content_part.done", {**where, "part": part}),
        ("response.output_item.done", {**at, "item": item}),
    ]


DIALECT = dialect.Dialect("openai_responses", to_chat, render, chat_completions.error, dialect.bearer_key)
