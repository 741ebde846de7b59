"""The OpenCode environment service: the rollouts API, OpenEnv's ``/mcp`` and ``/ws``, and the proxy."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import aiohttp
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from .api.fast_path import ProxyFastPath
from .api.http_api import api_router, service_error
from .api.openenv_protocol import OpenEnvProtocol
from .api.openenv_routes import openenv_router
from .api.openenv_sessions import SessionRegistry
from .api.sandbox_routes import sandbox_router
from .api.service import RolloutService, ServiceError
from .proxy.chat_completions import Proxy
from .proxy.routes import COUNT_TOKENS, DIALECTS
from .rollouts.manager import RolloutManager
from .rollouts.trace import TraceStore
from .sandbox import landlock
from .sandbox.firewall import SeatPorts, apply_network_rules
from .sandbox.sandbox import close_shared_dirs
from .settings import Settings

log = logging.getLogger("opencode_env_server")


def create_app(settings: Settings | None = None) -> ProxyFastPath:
    """Build the service; sandbox network rules are applied at start-up."""
    settings = settings or Settings.from_env()
    store = TraceStore(settings.traces_dir)
    manager = RolloutManager(settings, store)
    service = RolloutService(settings, manager)
    sessions = SessionRegistry(settings.max_sessions, settings.session_idle_timeout_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.network_isolation:
            apply_network_rules(
                [
                    SeatPorts(settings.seat_uid(i), settings.sandbox_proxy_port(i), settings.agent_port_base + i)
                    for i in range(settings.seats)
                ],
                [settings.verifier_uid(i) for i in range(settings.seats)],
            )
            # Only in isolation mode, which assumes the service's own container: on a shared host
            # (benchmarks, debugging) /tmp and friends stay as they are.
            if closed := close_shared_dirs():
                log.info("shared dirs no longer writable by sandbox uids: %s", ", ".join(closed))
        else:
            log.warning("SANDBOX_NETWORK_ISOLATION=off: agents can reach any address and shared temp dirs")
        if not landlock.AVAILABLE:
            log.warning(
                "this kernel has no Landlock ABI %d (Linux 6.12): sandboxes of different rollouts can reach "
                "each other's abstract Unix sockets and a rollout's checks",
                landlock.SCOPED_ABI,
            )
        await manager.recover()
        connector = aiohttp.TCPConnector(limit=512, limit_per_host=0, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=settings.upstream_timeout_s, connect=10.0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as http:
            app.state.proxy = service.proxy = Proxy(http)
            manager.start(http)
            reaper = asyncio.create_task(sessions.run_reaper())
            rollout_reaper = asyncio.create_task(manager.run_reaper())
            log.info(
                "opencode env ready: http://0.0.0.0:%d (API /rollouts, OpenEnv /mcp and /ws, proxy %s); "
                "sandbox proxy ports 127.0.0.1:%d-%d; inference %s; %d rollout slots, "
                "%d sandbox seats (OpenCode pre-started: %s), %d OpenEnv sessions; network isolation %s",
                settings.port,
                ", ".join([*DIALECTS, COUNT_TOKENS]),
                settings.sandbox_proxy_port(0),
                settings.sandbox_proxy_port(settings.seats - 1),
                settings.inference_url,
                settings.max_concurrent_rollouts,
                settings.seats,
                "yes" if settings.agent_prewarm else "no",
                settings.max_sessions,
                "on" if settings.network_isolation else "OFF",
            )
            try:
                yield
            finally:
                reaper.cancel()
                rollout_reaper.cancel()
                await manager.shutdown()  # first: running rollouts end as "service restarted"
                await sessions.close_all()

    app = FastAPI(title="OpenCode environment", version="0.1.0", lifespan=lifespan)
    app.include_router(api_router(service, store, sessions))
    app.include_router(openenv_router(OpenEnvProtocol(sessions, service), sessions))
    app.include_router(sandbox_router(manager, settings.opencode_bin))
    app.add_exception_handler(ServiceError, service_error)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, dict) else {"message": str(exc.detail)}
        return JSONResponse({"detail": detail}, status_code=exc.status_code)

    app.state.manager = manager
    return ProxyFastPath(app, settings)
