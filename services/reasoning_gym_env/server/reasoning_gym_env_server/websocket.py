"""The stateful ``/ws`` endpoint: one environment per connection, OpenEnv frames over text."""

import logging

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from .errors import CapacityError, ErrorCode
from .protocol import error_frame, handle_frame
from .sessions import SessionRegistry
from .settings import Settings

log = logging.getLogger("reasoning_gym_env_server.websocket")

# 1013 "try again later" tells well-behaved clients the refusal is temporary.
CLOSE_TRY_AGAIN_LATER = 1013
CLOSE_GOING_AWAY = 1001


def _encode(frame: dict) -> str:
    return orjson.dumps(frame).decode()


async def websocket_endpoint(websocket: WebSocket) -> None:
    """Serve one client session until it sends ``close``, disconnects or idles out."""
    registry: SessionRegistry = websocket.app.state.registry
    settings: Settings = websocket.app.state.settings
    await websocket.accept()

    async def expire() -> None:
        message = f"Session expired after {settings.session_idle_timeout_s:g}s without messages; reconnect to start a new one"
        await websocket.send_text(_encode(error_frame(message, ErrorCode.SESSION_EXPIRED)))
        await websocket.close(code=CLOSE_GOING_AWAY)

    try:
        session = registry.open("ws", on_expire=expire)
    except CapacityError as exc:
        log.warning("refused WebSocket session: %s", exc)
        frame = error_frame(str(exc), ErrorCode.CAPACITY_REACHED, active_sessions=exc.active, max_sessions=exc.maximum)
        await websocket.send_text(_encode(frame))
        await websocket.close(code=CLOSE_TRY_AGAIN_LATER)
        return

    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            session.touch()
            if len(raw) > settings.max_message_bytes:
                reply = error_frame(
                    f"Message of {len(raw)} bytes exceeds MAX_MESSAGE_BYTES={settings.max_message_bytes}",
                    ErrorCode.MESSAGE_TOO_LARGE,
                )
            else:
                try:
                    frame = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    reply = error_frame(f"Invalid JSON: {exc}", ErrorCode.INVALID_JSON)
                else:
                    reply = handle_frame(session.env, frame)
                    if reply is None:
                        break
            await websocket.send_text(_encode(reply))
    except (WebSocketDisconnect, RuntimeError):
        pass  # peer vanished or the reaper closed the socket under us
    finally:
        registry.close(session)
        if websocket.application_state == WebSocketState.CONNECTED:
            try:
                await websocket.close()
            except RuntimeError:
                pass
