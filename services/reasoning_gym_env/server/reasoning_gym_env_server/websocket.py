"""The stateful ``/ws`` endpoint: one environment per connection, OpenEnv frames over text.

Written against raw ASGI rather than Starlette's ``WebSocket`` wrapper: every message pays for the
layers between the socket and the environment, and at thousands of messages per second on one
core those layers cost more than the environment itself (see bench/env_server_load.py).
"""

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from .errors import CapacityError, ErrorCode
from .protocol import error_frame, handle_frame
from .sessions import SessionRegistry
from .settings import Settings

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# 1013 "try again later" tells well-behaved clients the refusal is temporary.
CLOSE_TRY_AGAIN_LATER = 1013
CLOSE_GOING_AWAY = 1001


def _text(frame: dict[str, Any]) -> dict[str, Any]:
    return {"type": "websocket.send", "text": orjson.dumps(frame).decode()}


async def serve_session(
    registry: SessionRegistry, settings: Settings, scope: dict[str, Any], receive: Receive, send: Send
) -> None:
    """Serve one client session until it sends ``close``, disconnects or idles out."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    closed = False

    async def close(code: int) -> None:
        nonlocal closed
        if not closed:
            closed = True
            await send({"type": "websocket.close", "code": code})

    async def expire() -> None:
        message = (
            f"Session expired after {settings.session_idle_timeout_s:g}s without messages; reconnect to start a new one"
        )
        await send(_text(error_frame(message, ErrorCode.SESSION_EXPIRED)))
        await close(CLOSE_GOING_AWAY)

    try:
        session = registry.open("ws", on_expire=expire)
    except CapacityError as exc:
        registry.notices.warning("refused WebSocket session: %s", exc)
        await send(
            _text(
                error_frame(str(exc), ErrorCode.CAPACITY_REACHED, active_sessions=exc.active, max_sessions=exc.maximum)
            )
        )
        await close(CLOSE_TRY_AGAIN_LATER)
        return

    limit = settings.max_message_bytes
    try:
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                break  # websocket.disconnect
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            session.touch()
            if len(raw) > limit:
                reply = error_frame(
                    f"Message of {len(raw)} bytes exceeds MAX_MESSAGE_BYTES={limit}", ErrorCode.MESSAGE_TOO_LARGE
                )
            else:
                try:
                    frame = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    reply = error_frame(f"Invalid JSON: {exc}", ErrorCode.INVALID_JSON)
                else:
                    reply = await handle_frame(session.env, frame)
                    if reply is None:
                        await close(1000)
                        break
            if closed:
                break
            await send(_text(reply))
    except OSError:
        pass  # the peer vanished mid-send
    finally:
        registry.close(session)
