"""The rollouts HTTP API: create, wait for, verify, inspect and close rollouts (see the service README)."""

import asyncio
import socket
from dataclasses import asdict
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from opencode_env_client.models import COMPLETED, FINAL, INFRA_FAILURE, CreatedRollout, Health, RolloutRequest, Turn

from ..rollouts.rollout import Rollout
from ..rollouts.trace import TraceStore, training_trace
from ..sandbox.sandbox import SandboxError
from . import run_rollout
from .openenv_sessions import SessionRegistry
from .service import RolloutService, ServiceError

MAX_WAIT_S = 3600.0
# Which replica answered (the container's host name): under Swarm, replicas of one service share a name.
REPLICA = socket.gethostname()


def json_response(payload: Any, status: int = 200) -> Response:
    """A JSON response serialised with orjson."""
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
    """``{"detail": {"message": ..., **data}}`` with the error's status."""
    return JSONResponse({"detail": {"message": exc.message, **exc.data}}, status_code=exc.status)


def api_router(service: RolloutService, store: TraceStore, sessions: SessionRegistry) -> APIRouter:
    """The HTTP API over ``service``; archived rollouts are read from ``store``."""
    router = APIRouter()
    manager, settings = service.manager, service.settings

    def live(rollout_id: str) -> Rollout:
        rollout = manager.rollouts.get(rollout_id)
        if rollout is None:
            raise ServiceError(404, f"no live rollout {rollout_id!r}")
        return rollout

    def recorded(rollout_id: str) -> tuple[dict[str, Any], list[Turn]]:
        """Summary and turns of a live rollout, or of one on the traces volume (e.g. before a restart)."""
        if rollout_id in manager.rollouts:
            rollout = manager.rollouts[rollout_id]
            return rollout.summary().model_dump(), rollout.turns
        archived = store.load(rollout_id)
        if archived is None:
            raise ServiceError(404, f"unknown rollout {rollout_id!r}")
        summary, turns = archived
        summary.pop("verification", None)
        return summary, turns

    @router.get("/health")
    async def health() -> Response:
        return json_response(
            Health(
                status="healthy",
                active_rollouts=manager.active,
                max_rollouts=settings.max_concurrent_rollouts,
                seats=manager.seats.count,
                warm_agents=manager.seats.warm_agents,
                sessions=sessions.active,
                max_sessions=sessions.max_sessions,
                inference_url=settings.inference_url,
                network_isolation=settings.network_isolation,
                replica=REPLICA,
                rollouts_total=manager.started_total,
            ).model_dump()
        )

    @router.get("/schema")
    async def schema() -> Response:
        return json_response({"rollout_request": RolloutRequest.model_json_schema(), "tools": [run_rollout.TOOL]})

    @router.post("/rollouts", status_code=201)
    async def create(request: RolloutRequest, http_request: Request) -> Response:
        rollout = await service.start(request)
        host = http_request.headers.get("host", f"127.0.0.1:{settings.port}")
        created = CreatedRollout(
            rollout_id=rollout.id,
            task_id=rollout.task.task_id,
            api_key=rollout.key,
            status=rollout.status,
            proxy_base_url=f"http://{host}/v1",
            model=rollout.model,
            sandbox_proxy_base_url=f"{settings.sandbox_proxy_origin(rollout.seat)}/v1",
        )
        return json_response(created.model_dump(), 201)

    @router.get("/rollouts/{rollout_id}")
    async def status(rollout_id: str) -> Response:
        return json_response(recorded(rollout_id)[0])

    @router.post("/rollouts/{rollout_id}/wait")
    async def wait(rollout_id: str, timeout_s: float = Query(600.0, ge=0, le=MAX_WAIT_S)) -> Response:
        rollout = live(rollout_id)
        stopping = asyncio.ensure_future(manager.stopping.wait())
        try:
            await asyncio.wait({rollout.runner, stopping}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if manager.stopping.is_set() and rollout.status not in FINAL:
            raise ServiceError(
                503,
                "the service is restarting: the rollout is recorded as an infrastructure failure "
                "(service restarted) and cannot be scored",
                {"rollout_id": rollout.id, "status": INFRA_FAILURE},
            )
        return json_response(rollout.summary().model_dump())

    @router.post("/rollouts/{rollout_id}/finish")
    async def finish(rollout_id: str) -> Response:
        rollout = live(rollout_id)
        rollout.stop(COMPLETED, "finished by the client")
        return json_response(rollout.summary().model_dump())

    @router.get("/rollouts/{rollout_id}/trace")
    async def trace(rollout_id: str) -> Response:
        return json_response(training_trace(recorded(rollout_id)[1], rollout_id))

    @router.get("/rollouts/{rollout_id}/turns")
    async def turns(rollout_id: str) -> Response:
        return json_response([asdict(t) for t in recorded(rollout_id)[1]])

    @router.post("/rollouts/{rollout_id}/verify")
    async def verify(rollout_id: str) -> Response:
        try:
            return json_response((await manager.verify(live(rollout_id))).model_dump())
        except ValueError as exc:
            raise ServiceError(409, str(exc)) from None

    @router.get("/rollouts/{rollout_id}/files")
    async def files(rollout_id: str) -> Response:
        try:
            return json_response((await live(rollout_id).sandbox.list_files())[0])
        except SandboxError as exc:
            raise ServiceError(409, f"cannot list the rollout's files: {exc}") from None

    @router.get("/rollouts/{rollout_id}/logs")
    async def logs(rollout_id: str) -> Response:
        return Response(await manager.agent_log(live(rollout_id)), media_type="text/plain")

    @router.delete("/rollouts/{rollout_id}", status_code=204)
    async def close(rollout_id: str) -> Response:
        await manager.close(live(rollout_id))
        return Response(status_code=204)

    @router.get("/v1/models")
    async def list_models() -> Response:
        return json_response({"object": "list", "data": [{"id": "policy", "object": "model", "owned_by": "rlstack"}]})

    return router
