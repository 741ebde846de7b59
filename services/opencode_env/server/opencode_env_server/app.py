"""HTTP API, the proxy route and the OpenEnv ``/ws`` entry point of the OpenCode environment."""

import asyncio
import contextlib
import logging
from dataclasses import asdict
from typing import Any, AsyncIterator, Optional

import aiohttp
import orjson
from fastapi import FastAPI, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from . import openenv_compat
from .proxy import UPSTREAM_ERRORS, Proxy, Send, request_error, send_error, send_warm_up_reply
from .rollouts import FINAL, INFRA_FAILURE, CapacityError, LimitReached, Rollout, RolloutManager
from .firewall import SeatPorts, apply_network_rules
from .sandbox import SandboxError, close_shared_dirs
from .settings import Settings, normalize_upstream
from .tasks import RolloutRequest
from .trace import TraceStore, Turn, training_trace

log = logging.getLogger("opencode_env_server")


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def create_app(settings: Optional[Settings] = None) -> "ProxyFastPath":
    """Build the service; sandbox network rules are applied at start-up."""
    settings = settings or Settings.from_env()
    store = TraceStore(settings.traces_dir)
    manager = RolloutManager(settings, store)
    models: dict[str, str] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.network_isolation:
            apply_network_rules([SeatPorts(settings.seat_uid(i), settings.sandbox_proxy_port(i),
                                           settings.agent_port_base + i) for i in range(manager.seats)])
            # Only in isolation mode, which assumes the service's own container: on a shared host
            # (benchmarks, debugging) /tmp and friends stay as they are.
            if closed := close_shared_dirs():
                log.info("shared dirs no longer writable by sandbox uids: %s", ", ".join(closed))
        else:
            log.warning("SANDBOX_NETWORK_ISOLATION=off: agents can reach any address and shared temp dirs")
        await manager.recover()
        connector = aiohttp.TCPConnector(limit=512, limit_per_host=0, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=settings.upstream_timeout_s, connect=10.0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as http:
            app.state.proxy = Proxy(http)
            manager.start(http)
            log.info("opencode env ready: http://0.0.0.0:%d (API /rollouts, proxy /v1/chat/completions, /ws); "
                     "sandbox proxy ports 127.0.0.1:%d-%d; inference %s; %d rollout slots, %d sandbox seats "
                     "(OpenCode pre-started: %s); network isolation %s",
                     settings.port, settings.sandbox_proxy_port(0), settings.sandbox_proxy_port(manager.seats - 1),
                     settings.inference_url, settings.max_concurrent_rollouts, manager.seats,
                     "yes" if settings.agent_prewarm else "no",
                     "on" if settings.network_isolation else "OFF")
            try:
                yield
            finally:
                await manager.shutdown()

    app = FastAPI(title="OpenCode environment", version="0.1.0", lifespan=lifespan)

    async def upstream_model(request: RolloutRequest) -> str:
        if request.model or settings.inference_model:
            return request.model or settings.inference_model
        base = normalize_upstream(request.upstream_url or settings.inference_url)
        if base not in models:
            try:
                listing = await app.state.proxy.get_json(f"{base}/v1/models", timeout_s=10)
                models[base] = listing["data"][0]["id"]
            except (*UPSTREAM_ERRORS, ValueError, KeyError, IndexError, TypeError) as exc:
                raise HTTPException(502, f"cannot list models at {base}/v1/models ({exc}); pass 'model'") from None
        return models[base]

    def live(rollout_id: str) -> Rollout:
        rollout = manager.rollouts.get(rollout_id)
        if rollout is None:
            raise HTTPException(404, f"no live rollout {rollout_id!r}")
        return rollout

    async def start(request: RolloutRequest) -> Rollout:
        if request.upstream_url is not None and not settings.upstream_allowed(request.upstream_url):
            raise HTTPException(403, f"upstream_url {request.upstream_url!r} is not allowed: the service sends model "
                                     "calls only to INFERENCE_URL and the URLs in ALLOWED_UPSTREAMS")
        if manager.stopping.is_set():
            raise HTTPException(503, "the service is shutting down; retry once it is back")
        try:
            return manager.create(request, await upstream_model(request))
        except CapacityError as exc:
            raise HTTPException(503, {"message": str(exc), "active_rollouts": manager.active,
                                      "max_rollouts": settings.max_concurrent_rollouts}) from None

    @app.get("/health")
    async def health() -> Response:
        return _json({"status": "healthy", "active_rollouts": manager.active,
                      "max_rollouts": settings.max_concurrent_rollouts, "seats": manager.seats,
                      "warm_agents": manager.warm_agents,
                      "inference_url": settings.inference_url,
                      "network_isolation": settings.network_isolation})

    @app.get("/schema")
    async def schema() -> Response:
        return _json({"rollout_request": RolloutRequest.model_json_schema(), "tools": [openenv_compat.RUN_ROLLOUT_TOOL]})

    @app.post("/rollouts", status_code=201)
    async def create_rollout(request: RolloutRequest, http_request: Request) -> Response:
        rollout = await start(request)
        host = http_request.headers.get("host", f"127.0.0.1:{settings.port}")
        return _json({"rollout_id": rollout.id, "api_key": rollout.key, "status": rollout.status,
                      "proxy_base_url": f"http://{host}/v1", "model": rollout.model}, 201)

    def recorded(rollout_id: str) -> tuple[dict[str, Any], list[Turn]]:
        """Summary and turns of a live rollout, or of one on the traces volume (e.g. before a restart)."""
        if rollout_id in manager.rollouts:
            rollout = manager.rollouts[rollout_id]
            return rollout.summary(), rollout.turns
        archived = store.load(rollout_id)
        if archived is None:
            raise HTTPException(404, f"unknown rollout {rollout_id!r}")
        return archived

    @app.get("/rollouts/{rollout_id}")
    async def get_rollout(rollout_id: str) -> Response:
        return _json(recorded(rollout_id)[0])

    @app.post("/rollouts/{rollout_id}/wait")
    async def wait(rollout_id: str, timeout_s: float = 600.0) -> Response:
        rollout = live(rollout_id)
        stopping = asyncio.ensure_future(manager.stopping.wait())
        try:
            await asyncio.wait({rollout.runner, stopping}, timeout=min(max(timeout_s, 0.0), 3600),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if manager.stopping.is_set() and rollout.status not in FINAL:
            raise HTTPException(503, {"message": "the service is restarting: the rollout is recorded as an "
                                                 "infrastructure failure (service restarted) and cannot be scored",
                                      "rollout_id": rollout.id, "status": INFRA_FAILURE})
        return _json({**rollout.summary(), "final": rollout.status in FINAL})

    @app.post("/rollouts/{rollout_id}/finish")
    async def finish(rollout_id: str) -> Response:
        rollout = live(rollout_id)
        rollout.stop("completed", "finished by the client")
        return _json(rollout.summary())

    @app.get("/rollouts/{rollout_id}/trace")
    async def trace(rollout_id: str) -> Response:
        return _json(training_trace(recorded(rollout_id)[1], rollout_id))

    @app.get("/rollouts/{rollout_id}/turns")
    async def turns(rollout_id: str) -> Response:
        return _json([asdict(t) for t in recorded(rollout_id)[1]])

    @app.post("/rollouts/{rollout_id}/verify")
    async def verify(rollout_id: str) -> Response:
        try:
            return _json(await manager.verify(live(rollout_id)))
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None

    @app.get("/rollouts/{rollout_id}/files")
    async def files(rollout_id: str) -> Response:
        try:
            return _json(await live(rollout_id).sandbox.list_files())
        except SandboxError as exc:
            raise HTTPException(409, f"cannot list the rollout's files: {exc}") from None

    @app.get("/rollouts/{rollout_id}/logs")
    async def logs(rollout_id: str) -> Response:
        return Response(await manager.agent_log(live(rollout_id)), media_type="text/plain")

    @app.delete("/rollouts/{rollout_id}", status_code=204)
    async def close(rollout_id: str) -> Response:
        await manager.close(live(rollout_id))
        return Response(status_code=204)

    @app.get("/v1/models")
    async def list_models() -> Response:
        return _json({"object": "list", "data": [{"id": "policy", "object": "model", "owned_by": "rlstack"}]})

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()

        async def reply(kind: str, data: dict[str, Any]) -> None:
            await websocket.send_text(orjson.dumps({"type": kind, "data": data}).decode())

        try:
            while True:
                try:
                    frame = orjson.loads(await websocket.receive_text())
                except orjson.JSONDecodeError as exc:
                    await reply("error", {"message": f"Invalid JSON: {exc}", "code": "INVALID_JSON"})
                    continue
                kind, data = (frame.get("type"), frame.get("data") or {}) if isinstance(frame, dict) else (None, {})
                if kind == "close":
                    break
                if kind == "reset":
                    await reply("observation", {"observation": {"tools": [openenv_compat.RUN_ROLLOUT_TOOL]},
                                                "reward": None, "done": False})
                elif kind == "state":
                    await reply("state", {"active_rollouts": manager.active})
                elif kind == "mcp" and data.get("method") == "tools/list":
                    await reply("mcp", {"jsonrpc": "2.0", "id": data.get("id"),
                                        "result": {"tools": [openenv_compat.RUN_ROLLOUT_TOOL]}})
                elif kind == "step" and data.get("type") == "call_tool" and data.get("tool_name") == "run_rollout":
                    await reply("observation", await run_rollout_tool(data.get("arguments") or {}))
                else:
                    await reply("error", {"message": f"Unsupported message {kind!r}; use reset, step "
                                          "(call_tool run_rollout), state, mcp tools/list or close", "code": "UNKNOWN_TYPE"})
        except WebSocketDisconnect:
            pass

    async def files_or_none(rollout: Rollout) -> dict[str, str]:
        try:
            return await rollout.sandbox.list_files()
        except SandboxError as exc:
            log.warning("rollout %s: cannot list its files: %s", rollout.id, exc)
            return {}

    async def run_rollout_tool(arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            request = openenv_compat.request_from_arguments(arguments)
            rollout = await start(request)
        except (ValueError, ValidationError, HTTPException) as exc:
            detail = exc.detail if isinstance(exc, HTTPException) else str(exc)
            return {"observation": {"tool_name": "run_rollout", "result": None, "error": str(detail)},
                    "reward": None, "done": True}
        try:
            await asyncio.wait({rollout.runner})
            verification = await manager.verify(rollout)
            result = openenv_compat.rollout_result(rollout.summary(), verification, [asdict(t) for t in rollout.turns],
                                                   await files_or_none(rollout), await manager.agent_log(rollout))
        finally:
            await manager.close(rollout)
        return {"observation": {"tool_name": "run_rollout", "result": result, "error": None},
                "reward": verification["reward"], "done": True}

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, dict) else {"message": str(exc.detail)}
        return JSONResponse({"detail": detail}, status_code=exc.status_code)

    app.state.manager = manager
    return ProxyFastPath(app, settings)


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
        elif seat is None:
            await self.api(scope, receive, send)
        elif scope["type"] == "http":
            await send_error(send, 404, "sandboxes reach only POST /v1/chat/completions")
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})

    async def chat_completions(self, scope: dict[str, Any], receive: Any, send: Send, seat: Optional[int]) -> None:
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
            return await send_error(send, 401, "unknown API key: each rollout's key is returned by POST /rollouts",
                                    "authentication_error")
        limit = self.settings.max_body_bytes
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return await send_error(send, 413, f"request body of {int(declared)} bytes exceeds PROXY_MAX_BODY_BYTES={limit}")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await send_error(send, 413, f"request body exceeds PROXY_MAX_BODY_BYTES={limit}")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        try:
            request = orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            return await send_error(send, 400, f"invalid JSON: {exc}")
        if (problem := request_error(request)) is not None:
            return await send_error(send, 400, problem)
        if warming:
            return await send_warm_up_reply(send, bool(request.get("stream")))
        try:
            await self.state.proxy.relay(rollout, request, send)
        except LimitReached as exc:
            await send_error(send, 429, str(exc), "rollout_limit")
