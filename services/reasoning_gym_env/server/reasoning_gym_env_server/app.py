"""ASGI application: a WebSocket fast path for ``/ws`` in front of the FastAPI HTTP routes."""

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from .environment import EpisodeCounter, ReasoningGymEnvironment
from .http_api import HTTPError, http_error_response, router
from .pool import WorkerPool
from .ratelimit import RateLimitedLog
from .sessions import SessionRegistry
from .settings import Settings
from .websocket import Receive, Send, serve_session

log = logging.getLogger("reasoning_gym_env_server")


class EnvServerApp:
    """Routes ``/ws`` sessions straight to ``serve_session`` and everything else to FastAPI."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.notices = notices = RateLimitedLog(log, settings.log_lines_per_minute)
        self.pool = WorkerPool(
            settings.dataset_workers,
            settings.dataset_build_timeout_s,
            settings.dataset_build_memory_mb,
            settings.max_message_bytes,
            notices,
        )
        self.episodes = EpisodeCounter()
        self.registry = SessionRegistry(
            settings.max_concurrent_envs,
            settings.max_http_sessions,
            settings.session_idle_timeout_s,
            lambda: ReasoningGymEnvironment(self.pool, settings.max_dataset_size, self.episodes),
            notices,
        )
        self.http = _http_app(self)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and scope["path"] == "/ws":
            await serve_session(self.registry, self.settings, scope, receive, send)
        else:
            await self.http(scope, receive, send)


def _http_app(server: EnvServerApp) -> FastAPI:
    settings = server.settings

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # uvicorn logs one line per malformed request or protocol error: same allowance as ours.
        logging.getLogger("uvicorn.error").addFilter(server.notices)
        await server.pool.start()
        reaper = asyncio.create_task(server.registry.run_reaper(), name="session-reaper")
        # Start-up objects (FastAPI, pydantic, reasoning-gym tables) never die: keep them out of
        # the collector's full passes, which otherwise show up as latency spikes under load.
        gc.freeze()
        log.info(
            "reasoning-gym env server ready: http://%s:%d (WebSocket ws://%s:%d/ws), MAX_CONCURRENT_ENVS=%d, "
            "MAX_HTTP_SESSIONS=%d, SESSION_IDLE_TIMEOUT_S=%g, MAX_MESSAGE_BYTES=%d, DATASET_WORKERS=%d, "
            "DATASET_BUILD_TIMEOUT_S=%g, DATASET_BUILD_MEMORY_MB=%d, MAX_DATASET_SIZE=%d",
            settings.host,
            settings.port,
            settings.host,
            settings.port,
            settings.max_concurrent_envs,
            settings.max_http_sessions,
            settings.session_idle_timeout_s,
            settings.max_message_bytes,
            settings.dataset_workers,
            settings.dataset_build_timeout_s,
            settings.dataset_build_memory_mb,
            settings.max_dataset_size,
        )
        try:
            yield
        finally:
            reaper.cancel()
            await server.pool.close()
            logging.getLogger("uvicorn.error").removeFilter(server.notices)

    app = FastAPI(title="reasoning-gym OpenEnv server", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.registry = server.registry
    app.state.pool = server.pool
    app.state.episodes = server.episodes
    app.add_exception_handler(HTTPError, http_error_response)
    app.include_router(router)
    return app


def create_app(settings: Settings | None = None) -> EnvServerApp:
    """Build the server: HTTP routes, the ``/ws`` session endpoint, the idle-session reaper and the
    dataset worker processes (started and stopped with the ASGI lifespan)."""
    return EnvServerApp(settings or Settings.from_env())
