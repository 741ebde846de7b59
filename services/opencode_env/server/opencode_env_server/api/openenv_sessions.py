"""OpenEnv sessions: one per ``openenv/session/create`` (or per ``/ws`` connection without a
``session_id``), shared between ``/mcp`` and ``/ws?session_id=``, reaped when idle."""

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from opencode_env_client.models import OpenCodeState

log = logging.getLogger("opencode_env_server.sessions")


class SessionError(Exception):
    """No such session (unknown, closed or expired), or no room for one; ``data`` extra detail."""

    def __init__(self, message: str, capacity: bool = False, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.capacity = capacity
        self.data = data or {}


@dataclass(eq=False)
class OpenEnvSession:
    """One client's environment: its state and the tool calls running for it."""

    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    state: OpenCodeState = field(default_factory=lambda: OpenCodeState(episode_id=str(uuid.uuid4())))
    last_active: float = field(default_factory=time.monotonic)
    websocket_attached: bool = False
    close_when_detached: bool = False  # ``openenv/session/close`` arrived while a WebSocket was attached
    calls: set[asyncio.Task] = field(default_factory=set)

    def touch(self) -> None:
        """Mark the session as active now."""
        self.last_active = time.monotonic()

    def reset(self) -> None:
        """A new episode: fresh state (running calls go on)."""
        self.state = OpenCodeState(episode_id=str(uuid.uuid4()))

    async def run(self, call: Awaitable[Any]) -> Any:
        """Run a tool call as the session's: closing the session cancels it. A caller that goes
        away (a dropped request) does not: the call finishes and the session records it."""
        task = asyncio.ensure_future(call)
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)
        try:
            return await asyncio.shield(task)
        finally:
            self.touch()


class SessionRegistry:
    """At most ``max_sessions`` sessions; those idle for ``idle_timeout_s`` (no call running, no
    WebSocket attached) are closed. Ids of recently ended sessions are remembered so that a late
    call hears why its session is gone."""

    def __init__(self, max_sessions: int, idle_timeout_s: float, remembered: int = 4096) -> None:
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self._sessions: dict[str, OpenEnvSession] = {}
        self._ended: collections.OrderedDict[str, str] = collections.OrderedDict()  # id -> why
        self._remembered = remembered

    @property
    def active(self) -> int:
        """Sessions holding a slot."""
        return len(self._sessions)

    def open(self) -> OpenEnvSession:
        """A new session, or ``SessionError`` (capacity) when every slot is taken."""
        if len(self._sessions) >= self.max_sessions:
            raise SessionError(
                f"all {self.max_sessions} OpenEnv sessions are in use; close one or raise MAX_SESSIONS",
                capacity=True,
                data={"active_sessions": self.active, "max_sessions": self.max_sessions},
            )
        session = OpenEnvSession()
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> OpenEnvSession:
        """The live session ``session_id``, or ``SessionError`` saying why there is none."""
        session = self._sessions.get(session_id)
        if session is None:
            why = self._ended.get(session_id)
            raise SessionError(f"session {session_id!r} {why}" if why else f"unknown session_id: {session_id!r}")
        return session

    async def close(self, session: OpenEnvSession, why: str = "was closed") -> None:
        """End the session: its running tool calls are cancelled (their rollouts stopped and removed)."""
        if self._sessions.pop(session.id, None) is None:
            return
        self._ended[session.id] = why
        while len(self._ended) > self._remembered:
            self._ended.popitem(last=False)
        for call in list(session.calls):
            call.cancel()
        if session.calls:
            await asyncio.wait(set(session.calls))

    async def reap_idle(self) -> int:
        """Close every session idle for longer than the timeout; returns how many."""
        deadline = time.monotonic() - self.idle_timeout_s
        idle = [
            s for s in self._sessions.values() if s.last_active < deadline and not s.calls and not s.websocket_attached
        ]
        for session in idle:
            await self.close(session, f"expired after {self.idle_timeout_s:g}s without a call (SESSION_IDLE_TIMEOUT_S)")
            log.info("closed OpenEnv session %s after %.0fs idle", session.id, self.idle_timeout_s)
        return len(idle)

    async def run_reaper(self) -> None:
        """Reap forever, several times per timeout period."""
        interval = min(max(self.idle_timeout_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            await self.reap_idle()

    async def close_all(self) -> None:
        """End every session (service shutdown)."""
        for session in list(self._sessions.values()):
            await self.close(session, "ended: the service restarted")
