"""Session slots: capacity accounting and reaping of idle sessions."""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from uuid import uuid4

from .environment import ReasoningGymEnvironment
from .errors import CapacityError
from .ratelimit import RateLimitedLog

log = logging.getLogger("reasoning_gym_env_server.sessions")


@dataclass(eq=False)
class Session:
    """One environment owned by one client (a WebSocket connection or an HTTP episode)."""

    kind: str
    env: ReasoningGymEnvironment
    id: str = field(default_factory=lambda: str(uuid4()))
    last_active: float = field(default_factory=time.monotonic)
    # Called once when the reaper expires the session, e.g. to close its WebSocket.
    on_expire: Callable[[], Awaitable[None]] | None = None

    def touch(self) -> None:
        """Mark the session as active now."""
        self.last_active = time.monotonic()


class SessionRegistry:
    """Hands out at most ``max_sessions`` sessions (of which at most ``max_http_sessions`` HTTP
    ones) and expires those idle for ``idle_timeout_s``."""

    def __init__(
        self,
        max_sessions: int,
        max_http_sessions: int,
        idle_timeout_s: float,
        new_env: Callable[[], ReasoningGymEnvironment],
        notices: RateLimitedLog,
    ) -> None:
        self.max_sessions = max_sessions
        self.max_http_sessions = max_http_sessions
        self.idle_timeout_s = idle_timeout_s
        self.new_env = new_env
        self.notices = notices  # the rate-limited log of everything clients can trigger
        self._sessions: dict[str, Session] = {}
        self._http_sessions = 0
        self.reaped_total = 0
        self.opened_total = 0  # sessions this replica has served since it started

    @property
    def active(self) -> int:
        """Number of sessions holding a slot."""
        return len(self._sessions)

    @property
    def active_http(self) -> int:
        """Number of HTTP sessions holding a slot."""
        return self._http_sessions

    def open(self, kind: str, on_expire: Callable[[], Awaitable[None]] | None = None) -> Session:
        """Take a slot for a new ``"ws"`` or ``"http"`` session, or raise ``CapacityError``."""
        if len(self._sessions) >= self.max_sessions:
            raise CapacityError(len(self._sessions), self.max_sessions)
        if kind == "http" and self._http_sessions >= self.max_http_sessions:
            raise CapacityError(self._http_sessions, self.max_http_sessions, "MAX_HTTP_SESSIONS", "HTTP sessions")
        session = Session(kind=kind, env=self.new_env(), on_expire=on_expire)
        self._sessions[session.id] = session
        self._http_sessions += kind == "http"
        self.opened_total += 1
        return session

    def get(self, session_id: str) -> Session | None:
        """The live session with this id, if any."""
        return self._sessions.get(session_id)

    def close(self, session: Session) -> None:
        """Free the session's slot (idempotent)."""
        if self._sessions.pop(session.id, None) is not None:
            self._http_sessions -= session.kind == "http"
            session.env.close()

    async def reap_idle(self) -> int:
        """Expire every session idle for longer than the timeout; returns how many."""
        deadline = time.monotonic() - self.idle_timeout_s
        expired = [s for s in self._sessions.values() if s.last_active < deadline]
        for session in expired:
            self.close(session)
            if session.on_expire is not None:
                try:
                    await session.on_expire()
                except Exception:  # the peer may already be gone; the slot is free either way
                    log.debug("closing expired %s session %s failed", session.kind, session.id, exc_info=True)
            self.notices.log(
                logging.INFO, "reaped %s session %s after %.0fs idle", session.kind, session.id, self.idle_timeout_s
            )
        self.reaped_total += len(expired)
        return len(expired)

    async def run_reaper(self) -> None:
        """Reap forever, checking several times per timeout period; also ends log windows."""
        interval = min(max(self.idle_timeout_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            await self.reap_idle()
            self.notices.flush()
