"""ASGI entry point: the proxy route on raw ASGI, everything else to the FastAPI app."""

from typing import Any

import orjson
from fastapi import FastAPI

from ..proxy.chat_completions import Send, refused_fields, request_error, send_body, send_error, send_warm_up_reply
from ..rollouts.manager import RolloutManager
from ..rollouts.rollout import LimitReached
from ..settings import Settings
from .http_limits import BodyRefused, read_body, replay


class ProxyFastPath:
    """ASGI entry point: ``POST /v1/chat/completions`` on raw ASGI, everything else to FastAPI.

    The proxy call is the per-step hot path of every agent; skipping the framework's routing and
    request/response objects there halves its overhead. Connections that arrive on a seat's sandbox
    proxy port get that route only, for that seat's key; the API, ``/ws`` and ``/health`` are
    answered on the service's own port. ``.state`` and ``.api`` expose the app.
    """

    PATH = "/v1/chat/completions"

    def __init__(self, api: FastAPI, settings: Settings) -> None:
        self.api = api
        self.state = api.state
        self.settings = settings

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        seat = self.settings.seat_of_proxy_port(scope["server"][1]) if scope.get("server") else None
        if scope["type"] == "http" and scope["path"] == self.PATH:
            await self.chat_completions(scope, receive, send, seat)
        elif seat is None and scope["type"] == "http":
            await self.bounded_api(scope, receive, send)
        elif seat is None:
            await self.api(scope, receive, send)
        elif scope["type"] == "http":
            await send_error(send, 404, "sandboxes reach only POST /v1/chat/completions")
        elif scope["type"] == "websocket":
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

    async def chat_completions(self, scope: dict[str, Any], receive: Any, send: Send, seat: int | None) -> None:
        """Authenticate by the rollout's API key (before reading the body), read the body within
        its bound, validate it, relay it."""
        if scope["method"] != "POST":
            return await send_error(send, 405, "use POST")
        manager: RolloutManager = self.state.manager
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        key = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        rollout, warming = manager.caller(key, seat)
        if rollout is None and not warming:
            return await send_error(
                send, 401, "unknown API key: each rollout's key is returned by POST /rollouts", "authentication_error"
            )
        try:
            body = await read_body(
                receive, headers.get(b"content-length"), self.settings.max_body_bytes, self.settings.idle_timeout_s
            )
        except BodyRefused as exc:
            return await send_error(send, exc.status, f"{exc.message} (PROXY_MAX_BODY_BYTES)")
        if body is None:
            return
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return await send_error(send, 400, f"invalid JSON: {exc}")
        if (problem := request_error(request)) is not None:
            return await send_error(send, 400, problem)
        if rollout is not None and rollout.record_turns and (problem := refused_fields(request)) is not None:
            return await send_error(send, 400, problem)
        if warming:
            return await send_warm_up_reply(send, bool(request.get("stream")))
        try:
            await self.state.proxy.relay(rollout, request, send)
        except LimitReached as exc:
            await send_error(send, 429, str(exc), "rollout_limit")
