"""Anthropic Messages (``POST /v1/messages``, ``/v1/messages/count_tokens``) to chat completions and back.

claude-code speaks it. ``system`` becomes a system message; ``tool_use`` blocks become the
assistant's ``tool_calls`` and ``tool_result`` blocks ``tool`` messages, in order; tools become
functions (their ``input_schema`` the parameters). Sampling fields (``temperature``, ``top_p``,
``top_k``, ``thinking``) are dropped like any agent's sampling fields; fields that change nothing the
engine samples (``metadata``, ...) are ignored; any other field is refused. The reply is an Anthropic
message, or its event stream (``message_start`` ... ``message_stop``) when the agent asked for one.
"""

import json
import secrets
from typing import Any

import orjson

from .dialect import (
    Dialect,
    DialectError,
    Rendered,
    bearer_key,
    chat_function,
    chat_message,
    list_at,
    refuse_unknown,
    sse,
    text_of,
    tool_arguments,
    usage_of,
)

TRANSLATED = frozenset(
    {"model", "messages", "system", "max_tokens", "tools", "tool_choice", "stream", "stop_sequences"}
)
# ``output_config`` carries the reasoning effort (a sampling setting); its structured-output
# ``format`` is guided decoding and is refused.
SAMPLING = frozenset({"temperature", "top_p", "top_k", "thinking", "output_config"})
# Bookkeeping and server-side features that change nothing the engine samples.
IGNORED = frozenset({"metadata", "service_tier", "context_management", "diagnostics"})
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request of a Messages request (raises ``DialectError``)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise DialectError("the body must be a JSON object with a 'messages' list")
    refuse_unknown(body, TRANSLATED | IGNORED, SAMPLING)
    output_config = body.get("output_config") or {}
    if not isinstance(output_config, dict) or set(output_config) - {"effort"}:
        raise DialectError(
            "output_config: only 'effort' is relayed (structured output is sampled under guided decoding)"
        )
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": text_of(body["system"], ("text",), "system")})
    for index, message in enumerate(body["messages"]):
        messages += _messages(message, f"messages[{index}]")
    chat: dict[str, Any] = {"messages": messages, "model": body.get("model")}
    # Chat's own sampling fields go along (a recorded rollout's are replaced by the trainer's).
    chat.update({name: body[name] for name in ("temperature", "top_p", "top_k") if name in body})
    if body.get("max_tokens") is not None:
        chat["max_tokens"] = body["max_tokens"]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if body.get("tools"):
        # A deferred tool is not shown to the model until a tool search loads it.
        tools = [
            _tool(tool, f"tools[{i}]")
            for i, tool in enumerate(list_at(body["tools"], "tools"))
            if not (isinstance(tool, dict) and tool.get("defer_loading"))
        ]
        if tools:
            chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat.update(_tool_choice(body["tool_choice"]))
    return chat


def _messages(message: Any, where: str) -> list[dict[str, Any]]:
    """A Messages turn as chat messages: tool results first (one ``tool`` message each), then text.
    claude-code also puts ``system`` turns among the messages."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
        raise DialectError(f"{where}: a message needs role 'user', 'assistant' or 'system'")
    content = message.get("content")
    if isinstance(content, str) or message["role"] == "system":
        return [{"role": message["role"], "content": text_of(content, ("text",), where)}]
    texts, thinking, calls, results = [], [], [], []
    for i, block in enumerate(list_at(content, f"{where}.content")):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "thinking" and message["role"] == "assistant":
            thinking.append(block.get("thinking") or "")
        elif kind == "redacted_thinking" and message["role"] == "assistant":
            continue
        elif kind == "tool_use" and message["role"] == "assistant":
            # json's spacing, as models write their calls (vLLM re-renders parsed arguments anyway).
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
        elif kind == "tool_result" and message["role"] == "user":
            text = text_of(block.get("content"), ("text",), f"{where}.content[{i}].content")
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
        else:
            raise DialectError(
                f"{where}.content[{i}]: block of type {kind!r} not supported in a {message['role']} message"
            )
    if message["role"] == "user":
        return results + ([{"role": "user", "content": "\n".join(texts)}] if texts or not results else [])
    reply: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if thinking:
        reply["reasoning_content"] = "\n".join(thinking)
    if calls:
        reply["tool_calls"] = calls
    return [reply]


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or tool.get("type") not in (None, "custom"):
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise DialectError(f"{where}: only client tools (name, input_schema) are relayed, not {kind!r}")
    return chat_function(tool["name"], tool.get("description"), tool.get("input_schema"))


def _tool_choice(choice: Any) -> dict[str, Any]:
    if not isinstance(choice, dict):
        raise DialectError("'tool_choice' must be an object")
    kind = choice.get("type")
    chat: dict[str, Any] = {}
    if kind in ("auto", "none"):
        chat["tool_choice"] = kind
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    else:
        raise DialectError(f"tool_choice of type {kind!r} not supported")
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False
    return chat


def message_of(request: dict[str, Any], completion: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic message of an engine reply."""
    message, finish, stop = chat_message(completion)
    content: list[dict[str, Any]] = []
    if message.get("reasoning_content") or message.get("reasoning"):
        content.append(
            {"type": "thinking", "thinking": message.get("reasoning_content") or message["reasoning"], "signature": ""}
        )
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_{secrets.token_hex(12)}",
                "name": function.get("name"),
                "input": tool_arguments(function.get("arguments")),
            }
        )
    stopped_at = stop if isinstance(stop, str) else None
    prompt_tokens, completion_tokens = usage_of(completion)
    return {
        "id": f"msg_{completion.get('id') or secrets.token_hex(12)}",
        "type": "message",
        "role": "assistant",
        "model": request.get("model") or completion.get("model"),
        "content": content,
        "stop_reason": "stop_sequence" if stopped_at else STOP_REASONS.get(finish, "end_turn"),
        "stop_sequence": stopped_at,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens},
    }


def render(request: dict[str, Any], completion: dict[str, Any], stream: bool) -> Rendered:
    """The reply: the message as JSON, or as Anthropic's event stream."""
    message = message_of(request, completion)
    if not stream:
        return Rendered(orjson.dumps(message))
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**message["usage"], "output_tokens": 0}
    events = [sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        events.append(
            sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": _empty(block)})
        )
        events.append(
            sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": _delta(block)})
        )
        events.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    events.append(sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(sse("message_stop", {"type": "message_stop"}))
    return Rendered(b"".join(events), b"text/event-stream")


def _empty(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {"type": "text", "text": ""}
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {**block, "input": {}}


def _delta(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {"type": "text_delta", "text": block["text"]}
    if block["type"] == "thinking":
        return {"type": "thinking_delta", "thinking": block["thinking"]}
    return {"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


def error(status: int, message: str, kind: str) -> bytes:
    """An Anthropic error body (its type from the status; ``kind`` names ours in the message)."""
    kind_name = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": kind_name, "message": f"{message} ({kind})"}})


def key(headers: dict[bytes, bytes]) -> str:
    """``x-api-key`` (ANTHROPIC_API_KEY), else a bearer token (ANTHROPIC_AUTH_TOKEN)."""
    return headers.get(b"x-api-key", b"").decode("latin-1").strip() or bearer_key(headers)


def count_tokens_reply(tokens: int) -> bytes:
    """The body of a ``count_tokens`` answer."""
    return orjson.dumps({"input_tokens": tokens})


DIALECT = Dialect("anthropic_messages", to_chat, render, error, key)
