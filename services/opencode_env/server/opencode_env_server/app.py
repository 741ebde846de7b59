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
from .proxy import UPSTREAM_ERRORS, Proxy, Send, send_error, send_warm_up_reply
from .rollouts import FINAL, CapacityError, LimitReached, Rollout, RolloutManager
from .sandbox import apply_network_rules
from .settings import Settings
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
            first = settings.sandbox_uid_base
            apply_network_rules(first, first + manager.seats - 1, settings.port)
        else:
            log.warning("SANDBOX_NETWORK_ISOLATION=off: agents can reach any address")
        connector = aiohttp.TCPConnector(limit=512, limit_per_host=0, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=settings.upstream_timeout_s, connect=10.0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as http:
            app.state.proxy = Proxy(http)
            manager.start(http)
            log.info("opencode env ready: http://0.0.0.0:%d (API /rollouts, proxy /v1/chat/completions, /ws); "
                     "inference %s; %d rollout slots, %d sandbox seats (OpenCode pre-started: %s); network isolation %s",
                     settings.port, settings.inference_url, settings.max_concurrent_rollouts, manager.seats,
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
        base = (request.upstream_url or settings.inference_url).rstrip("/")
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
        await asyncio.wait({rollout.runner}, timeout=min(timeout_s, 3600))
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
        return _json(live(rollout_id).sandbox.list_files())

    @app.get("/rollouts/{rollout_id}/logs")
    async def logs(rollout_id: str) -> Response:
        return Response(manager.agent_log(live(rollout_id)), media_type="text/plain")

    @app.delete("/rollouts/{rollout_id}", status_code=204)
    async def close(rollout_id: str) -> Response:
        manager.close(live(rollout_id))
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
                                                   rollout.sandbox.list_files(), manager.agent_log(rollout))
        finally:
            manager.close(rollout)
        return {"observation": {"tool_name": "run_rollout", "result": result, "error": None},
                "reward": verification["reward"], "done": True}

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, dict) else {"message": str(exc.detail)}
        return JSONResponse({"detail": detail}, status_code=exc.status_code)

    app.state.manager = manager
    return ProxyFastPath(app)


class ProxyFastPath:
    """ASGI entry point: ``POST /v1/chat/completions`` on raw ASGI, everything else to FastAPI.

    The proxy call is the per-step hot path of every agent; skipping the framework's routing and
    request/response objects there halves its overhead. ``.state`` and ``.api`` expose the app.
    """

    PATH = "/v1/chat/completions"

    def __init__(self, api: FastAPI) -> None:
        self.api = api
        self.state = api.state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == self.PATH:
            await self.chat_completions(scope, receive, send)
        else:
            await self.api(scope, receive, send)

    async def chat_completions(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        """Authenticate by the rollout's API key, validate the body, relay it."""
        if scope["method"] != "POST":
            return await send_error(send, 405, "use POST")
        manager: RolloutManager = self.state.manager
        auth = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), "")
        key = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        rollout = manager.by_key.get(key)
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        warming = key in manager.warming  # checked first: a rollout may already hold the key of its warming agent
        if rollout is None and not warming:
            return await send_error(send, 401, "unknown API key: each rollout's key is returned by POST /rollouts",
                                    "authentication_error")
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return await send_error(send, 400, f"invalid JSON: {exc}")
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            return await send_error(send, 400, "the body must be a JSON object with a 'messages' list")
        if warming:
            return await send_warm_up_reply(send, bool(request.get("stream")))
        try:
            await self.state.proxy.relay(rollout, request, send)
        except LimitReached as exc:
            await send_error(send, 429, str(exc), "rollout_limit")
