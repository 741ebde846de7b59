"""``/rollouts/{id}/sandbox/...``: the sandbox API a harness's ``SandboxBackend`` drives
(``opencode_env_client.RemoteSandboxBackend``); see ``sandbox_operations`` for where each runs."""

from collections.abc import Awaitable

from fastapi import APIRouter, Query
from fastapi.responses import Response
from opencode_env_client.models import SandboxCommand, SandboxPath, SandboxWrite
from pydantic import BaseModel

from ..rollouts.manager import RolloutManager
from ..rollouts.rollout import Rollout
from .http_api import json_response
from .sandbox_operations import OperationRefused, SandboxOperations, operations_of
from .service import ServiceError

MAX_JOB_WAIT_S = 3600.0


def sandbox_router(manager: RolloutManager, opencode_bin: str) -> APIRouter:
    """The sandbox API over the live rollouts of ``manager``."""
    router = APIRouter(prefix="/rollouts/{rollout_id}/sandbox")

    def operations(rollout_id: str) -> SandboxOperations:
        rollout: Rollout | None = manager.rollouts.get(rollout_id)
        if rollout is None:
            raise ServiceError(404, f"no live rollout {rollout_id!r}")
        return operations_of(rollout, opencode_bin)

    async def answer(call: Awaitable[BaseModel], status: int = 200) -> Response:
        try:
            return json_response((await call).model_dump(), status)
        except OperationRefused as exc:
            raise ServiceError(exc.status, str(exc)) from None

    @router.post("/exec")
    async def exec_command(rollout_id: str, command: SandboxCommand) -> Response:
        return await answer(operations(rollout_id).exec(command))

    @router.post("/write")
    async def write(rollout_id: str, body: SandboxWrite) -> Response:
        return await answer(operations(rollout_id).write(body.path, body.content))

    @router.post("/read")
    async def read(rollout_id: str, body: SandboxPath) -> Response:
        return await answer(operations(rollout_id).read(body.path))

    @router.post("/exists")
    async def exists(rollout_id: str, body: SandboxPath) -> Response:
        return await answer(operations(rollout_id).exists(body.path))

    @router.post("/jobs", status_code=201)
    async def start_job(rollout_id: str, command: SandboxCommand) -> Response:
        return await answer(operations(rollout_id).start_job(command), 201)

    @router.post("/jobs/{job_id}/wait")
    async def wait_job(
        rollout_id: str, job_id: str, timeout_s: float = Query(60.0, ge=0, le=MAX_JOB_WAIT_S)
    ) -> Response:
        return await answer(operations(rollout_id).wait_job(job_id, timeout_s))

    @router.delete("/jobs/{job_id}")
    async def kill_job(rollout_id: str, job_id: str) -> Response:
        return await answer(operations(rollout_id).kill_job(job_id))

    return router
