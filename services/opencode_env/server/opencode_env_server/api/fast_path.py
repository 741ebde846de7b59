"""ASGI entry point: the proxy route on raw ASGI, everything else to the FastAPI app."""

import functools
from typing import Any

import orjson
from fastapi import FastAPI

from ..proxy import anthropic_messages, chat_completions
from ..proxy.chat_completions import UPSTREAM_ERRORS, WARM_UP_COMPLETION, Send, refused_fields, send_body
from ..proxy.dialect import Dialect, DialectError
from ..proxy.routes import COUNT_TOKENS, DIALECTS
from ..rollouts.manager import RolloutManager
from ..rollouts.rollout import LimitReached, Rollout
from ..settings import Settings
from .http_limits import BodyRefused, read_body, replay


class ProxyFastPath:
    """ASGI entry point: the proxy's model-call routes (``routes.DIALECTS``, ``COUNT_TOKENS``) on raw
    ASGI, everything else to FastAPI.

    The proxy call is the per-step hot path of every agent; skipping the framework's routing and
    request/response objects there halves its overhead. Connections that arrive on a seat's sandbox
    proxy port get those routes only, for that seat's key; the API, ``/ws`` and ``/health`` are
    answered on the service's own port. ``.state`` and ``.api`` expose the app.
    """

    def __init__(self, api: FastAPI, settings: Settings) -> None:
        self.api = api
        self.state = api.state
        self.settings = settings

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        seat = self.settings.seat_of_proxy_port(scope["server"][1]) if scope.get("server") else None
        path = scope.get("path")
        if scope["type"] == "http" and (path in DIALECTS or path == COUNT_TOKENS):
            await self.model_call(scope, receive, send, seat)
        elif seat is None and scope["type"] == "http":
            await self.bounded_api(scope, receive, send)
        elif seat is None:
            await self.api(scope, receive, send)
        elif scope["type"] == "http":
            await chat_completions.send_error(send, 404, f"sandboxes reach only POST {', '.join(DIALECTS)}")
        elif scope["type"] == "websocket":  # codex falls back from its Responses WebSocket to HTTPS
            await send({"type": "websocket.close", "code": 1008})

    async def bounded_api(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        """An API request whose body has been read within ``API_MAX_BODY_BYTES`` and the idle timeout."""
        try:
            body = await read_body(
                receive,
                dict(scope["headers"]).get(b"content-length"),
                self.settings.api_max_body_bytes,
                self.settings.idle_timeout_s,
            )
        except BodyRefused as exc:
            return await send_body(send, exc.status, orjson.dumps({"detail": {"message": exc.message}}))
        if body is not None:
            await self.api(scope, replay(body, receive), send)

    async def model_call(self, scope: dict[str, Any], receive: Any, send: Send, seat: int | None) -> None:
        """Authenticate by the rollout's API key (before reading the body), read the body within
        its bound, translate it to a chat completion and validate it, relay it."""
        counting = scope["path"] == COUNT_TOKENS
        dialect: Dialect = anthropic_messages.DIALECT if counting else DIALECTS[scope["path"]]

        async def fail(status: int, message: str, kind: str = "invalid_request_error") -> None:
            await send_body(send, status, dialect.error(status, message, kind))

        if scope["method"] != "POST":
            return await fail(405, "use POST")
        manager: RolloutManager = self.state.manager
        headers = dict(scope["headers"])
        rollout, warming = manager.caller(dialect.key(headers), seat)
        if rollout is None and not warming:
            return await fail(
                401, "unknown API key: each rollout's key is returned by POST /rollouts", "authentication_error"
            )
        try:
            body = await read_body(
                receive, headers.get(b"content-length"), self.settings.max_body_bytes, self.settings.idle_timeout_s
            )
        except BodyRefused as exc:
            return await fail(exc.status, f"{exc.message} (PROXY_MAX_BODY_BYTES)")
        if body is None:
            return
        try:
            request = orjson.loads(body)
            chat = dialect.to_chat(request)
        except orjson.JSONDecodeError as exc:
            return await fail(400, f"invalid JSON: {exc}")
        except DialectError as exc:
            return await fail(400, str(exc))
        if (problem := chat_completions.request_error(chat)) is not None:
            return await fail(400, problem)
        if rollout is not None and rollout.record_turns and (problem := refused_fields(chat)) is not None:
            return await fail(400, problem)
        stream = bool(request.get("stream"))
        if counting:
            return await self.count_tokens(rollout, chat, fail, send)
        if warming:
            rendered = dialect.render(request, WARM_UP_COMPLETION, stream)
            return await send_body(send, 200, rendered.body, rendered.content_type)
        reply_as = (
            None if dialect is chat_completions.DIALECT else functools.partial(dialect.render, request, stream=stream)
        )
        try:
            await self.state.proxy.relay(rollout, chat, send, reply_as, dialect.error)
        except LimitReached as exc:
            await fail(429, str(exc), "rollout_limit")

    async def count_tokens(self, rollout: Rollout | None, chat: dict[str, Any], fail: Any, send: Send) -> None:
        """Anthropic's ``count_tokens``: the engine's prompt length (a warming server gets 0)."""
        if rollout is None:
            return await send_body(send, 200, anthropic_messages.count_tokens_reply(0))
        try:
            tokens = await self.state.proxy.count_tokens(rollout, chat)
        except (*UPSTREAM_ERRORS, ValueError, KeyError) as exc:
            return await fail(
                502, f"inference upstream could not count tokens: {type(exc).__name__}: {exc}", "upstream_error"
            )
        await send_body(send, 200, anthropic_messages.count_tokens_reply(tokens))
