"""ASGI application factory."""

import asyncio
import contextlib
import logging
from typing import AsyncIterator, Optional

from fastapi import FastAPI

from .http_api import HTTPError, http_error_response, router
from .sessions import SessionRegistry
from .settings import Settings
from .websocket import websocket_endpoint

log = logging.getLogger("reasoning_gym_env_server")


def create_app(settings: Optional[Settings] = None) -> FastAPI:
    """Build the server: HTTP routes, the ``/ws`` session endpoint and the idle-session reaper."""
    settings = settings or Settings.from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(app.state.registry.run_reaper(), name="session-reaper")
        log.info(
            "reasoning-gym env server ready: http://%s:%d (WebSocket /ws), MAX_CONCURRENT_ENVS=%d, "
            "SESSION_IDLE_TIMEOUT_S=%g, MAX_MESSAGE_BYTES=%d",
            settings.host, settings.port, settings.max_concurrent_envs,
            settings.session_idle_timeout_s, settings.max_message_bytes,
        )
        try:
            yield
        finally:
            reaper.cancel()

    app = FastAPI(title="reasoning-gym OpenEnv server", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.registry = SessionRegistry(settings.max_concurrent_envs, settings.session_idle_timeout_s)
    app.add_exception_handler(HTTPError, http_error_response)
    app.include_router(router)
    app.add_api_websocket_route("/ws", websocket_endpoint)
    return app
