"""What every wire dialect the proxy speaks provides, and the choice of dialect by request path.

An agent calls the proxy in its own dialect; the proxy turns the request into the engine's
chat-completions request (``to_chat``), sends that upstream without streaming, records the turn
token-exact as for any chat-completions call, and renders the engine's chat completion back in the
agent's dialect (``render``: one JSON body, or server-sent events when the agent asked for a
stream). The allow-list, budget and recording rules of ``chat_completions`` then apply to every
dialect alike, because they are applied to the translated request.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson


class DialectError(ValueError):
    """A request the dialect cannot translate (the agent gets a 400 with this message)."""


@dataclass(frozen=True)
class Rendered:
    """A reply in the agent's dialect: its bytes and content type."""

    body: bytes
    content_type: bytes = b"application/json"


@dataclass(frozen=True)
class Dialect:
    """One wire dialect: how its requests become chat completions and the engine's replies return.

    ``to_chat(body)`` raises ``DialectError``; ``render(request, completion, stream)`` gets the
    agent's original request and the engine's chat completion; ``error(status, message, kind)`` is
    an error body in the dialect's shape; ``key(headers)`` the API key the agent presented.
    """

    name: str
    to_chat: Callable[[dict[str, Any]], dict[str, Any]]
    render: Callable[[dict[str, Any], dict[str, Any], bool], Rendered]
    error: Callable[[int, str, str], bytes]
    key: Callable[[dict[bytes, bytes]], str]


def refuse_unknown(body: dict[str, Any], relayed: frozenset[str], sampling: frozenset[str]) -> None:
    """Raise ``DialectError`` naming the fields that are neither ``relayed`` (translated or harmless)
    nor ``sampling`` fields (dropped): any other field might change what the engine samples."""
    unknown = sorted(set(body) - relayed - sampling)
    if unknown:
        raise DialectError(
            f"field(s) {', '.join(map(repr, unknown))} not relayed: a recorded rollout's calls are sampled under "
            f"the trainer's settings only; allowed: {', '.join(sorted(relayed))}"
        )


def list_at(value: Any, where: str) -> list[Any]:
    """``value``, which must be a list (else ``DialectError`` naming ``where``)."""
    if not isinstance(value, list):
        raise DialectError(f"'{where}' must be a list")
    return value


def chat_function(name: str, description: str | None, parameters: dict[str, Any] | None) -> dict[str, Any]:
    """A chat-completions function tool."""
    function: dict[str, Any] = {"name": name, "parameters": parameters or {"type": "object"}}
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def bearer_key(headers: dict[bytes, bytes]) -> str:
    """The token of an ``Authorization: Bearer`` header ("" without one)."""
    auth = headers.get(b"authorization", b"").decode("latin-1")
    return auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""


def sse(event: str | None, data: dict[str, Any]) -> bytes:
    """One server-sent event (``event:`` line only when named)."""
    head = b"" if event is None else b"event: " + event.encode() + b"\n"
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def tool_arguments(arguments: str) -> dict[str, Any]:
    """A tool call's JSON arguments as an object; text that is not a JSON object is kept under
    ``"arguments"`` so the agent sees what the model wrote."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def text_of(content: Any, kinds: tuple[str, ...], where: str) -> str:
    """The text of a content that is a string or a list of text parts of ``kinds``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise DialectError(f"{where}: content must be a string or a list of parts")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in kinds or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise DialectError(f"{where}: part of type {kind!r} not supported (text parts only: {', '.join(kinds)})")
        texts.append(part["text"])
    return "\n".join(texts)


def chat_message(completion: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | int | None]:
    """The engine reply's message, finish reason and stop reason (vLLM's matched stop string or token)."""
    choice = (completion.get("choices") or [{}])[0]
    return choice.get("message") or {}, choice.get("finish_reason"), choice.get("stop_reason")


def usage_of(completion: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of an engine reply."""
    usage = completion.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
