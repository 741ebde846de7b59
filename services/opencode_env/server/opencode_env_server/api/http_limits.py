"""Bounds on what a client may hold open: request headers in time, request bodies in size and pace.

- ``HeaderDeadline``: uvicorn's HTTP protocol, closing a connection whose request headers are not
  complete ``HTTP_HEADER_TIMEOUT_S`` after it opened or after its previous response (uvicorn's own
  keep-alive timer stops at the first byte, so a client that trickles headers held it forever).
- ``read_body``: a request body read to its end within ``API_MAX_BODY_BYTES`` (413 beyond) with at
  most ``HTTP_IDLE_TIMEOUT_S`` between chunks (408), before any route sees it.
"""

import asyncio
from asyncio import TimerHandle
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

Receive = Callable[[], Awaitable[dict[str, Any]]]


class BodyRefused(Exception):
    """A request body over its bound (413) or stalled (408)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def header_deadline(timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a deadline of ``timeout_s`` on each request's headers."""

    class HeaderDeadline(HttpToolsProtocol):
        _deadline: TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(timeout_s, self._late)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _late(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers are due in time too

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadline


async def read_body(receive: Receive, declared: bytes | None, limit: int, idle_timeout_s: float) -> bytes | None:
    """The whole body (None if the client went away); raises ``BodyRefused`` past ``limit`` bytes
    (also when the declared content-length is) or after ``idle_timeout_s`` without a chunk."""
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyRefused(413, f"request body of {int(declared)} bytes exceeds {limit} bytes")
    chunks, size = [], 0
    while True:
        try:
            message = await asyncio.wait_for(receive(), idle_timeout_s)
        except TimeoutError:
            raise BodyRefused(408, f"no request body data for {idle_timeout_s:g}s") from None
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyRefused(413, f"request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` as one message, then waits on the client (disconnects)."""
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
