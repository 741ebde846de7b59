"""OpenEnv's transports: ``POST /mcp`` (JSON-RPC) and ``/ws`` (frames; ``?session_id=`` attaches
to a session made by ``openenv/session/create``)."""

import asyncio
import contextlib

import orjson
from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import Response

from .http_api import json_response
from .openenv_protocol import PARSE_ERROR, OpenEnvProtocol, rpc_error, ws_error
from .openenv_sessions import OpenEnvSession, SessionError, SessionRegistry

MAX_RPC_BYTES = 4 << 20
QUEUED_FRAMES = 16  # frames read ahead while one is answered (then the reader waits)


def openenv_router(protocol: OpenEnvProtocol, sessions: SessionRegistry) -> APIRouter:
    """``POST /mcp`` and ``/ws`` over ``protocol``."""
    router = APIRouter()

    @router.post("/mcp")
    async def mcp(request: Request) -> Response:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_RPC_BYTES:
            return json_response(rpc_error(None, PARSE_ERROR, f"request of {declared} bytes exceeds {MAX_RPC_BYTES}"))
        try:
            message = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return json_response(rpc_error(None, PARSE_ERROR, f"Parse error: {exc}"))
        return json_response(await protocol.handle_rpc(message))

    @router.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        session, owned = await _attach(websocket, sessions, websocket.query_params.get("session_id"))
        if session is None:
            return
        try:
            await _serve(websocket, protocol, session)
        finally:
            session.websocket_attached = False
            if owned or session.close_when_detached:
                await sessions.close(session)
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close()

    return router


async def _attach(
    websocket: WebSocket, sessions: SessionRegistry, session_id: str | None
) -> tuple[OpenEnvSession | None, bool]:
    """The connection's session (named, or a new one it owns), or None after an error frame."""
    try:
        if session_id:
            session = sessions.get(session_id)
            if session.websocket_attached:
                raise SessionError(f"session {session_id!r} already has an attached WebSocket")
        else:
            session = sessions.open()
    except SessionError as exc:
        code = "CAPACITY_REACHED" if exc.capacity else "SESSION_ERROR"
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.send_text(orjson.dumps(ws_error(str(exc), code, **exc.data)).decode())
            await websocket.close()
        return None, False
    session.websocket_attached = True
    session.touch()
    return session, not session_id


async def _serve(websocket: WebSocket, protocol: OpenEnvProtocol, session: OpenEnvSession) -> None:
    """Answer frames in order until the client closes or goes; a client that goes mid-call stops
    waiting for it (the caller then closes the session it owns, which stops the call's rollout)."""
    frames: asyncio.Queue[str | None] = asyncio.Queue(QUEUED_FRAMES)

    async def read() -> None:
        try:
            while True:
                await frames.put(await websocket.receive_text())
        except (WebSocketDisconnect, RuntimeError, KeyError):  # KeyError: a binary frame
            pass

    reader = asyncio.create_task(read())
    try:
        while True:
            next_frame = asyncio.ensure_future(frames.get())
            await asyncio.wait({next_frame, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not next_frame.done():
                next_frame.cancel()
                return
            answer = asyncio.ensure_future(protocol.handle_frame(next_frame.result(), session))
            await asyncio.wait({answer, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                answer.cancel()
                return
            reply = answer.result()
            if reply is None:
                return
            await websocket.send_text(orjson.dumps(reply).decode())
    finally:
        reader.cancel()
