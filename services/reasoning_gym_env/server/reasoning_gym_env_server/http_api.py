"""HTTP endpoints: OpenEnv's ``/health /schema /metadata /reset /step /state`` plus ``/datasets``.

HTTP is stateless, as upstream: ``POST /reset`` answers from a fresh environment and keeps
nothing. A client that asks for a session (``"open_session": true``) gets a ``session_id``;
passing it to ``/step``, ``/state`` and ``/reset`` continues that episode, so full episodes work
over plain HTTP. Sessions count against ``MAX_CONCURRENT_ENVS`` (and ``MAX_HTTP_SESSIONS``) and are
reaped when idle, like WebSocket ones.
"""

import socket
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from openenv.core.env_server.types import State
from pydantic import BaseModel, ValidationError
from reasoning_gym_env import (
    ReasoningGymAction,
    ReasoningGymObservation,
    ReasoningGymResetRequest,
    ReasoningGymStepRequest,
)

from .environment import METADATA
from .errors import CapacityError, EnvInputError, ErrorCode
from .pool import WorkerPool
from .protocol import observation_payload, validation_errors, validation_message
from .sessions import Session, SessionRegistry
from .spec import dataset_names

router = APIRouter()
Body = TypeVar("Body", bound=BaseModel)

# Which replica answered (the container's host name): under Swarm, replicas of one service share a name.
REPLICA = socket.gethostname()

# Status of an environment error by its code (anything else from the environment is bad input).
ENV_ERROR_STATUS = {ErrorCode.SESSION_ERROR: 409, ErrorCode.DATASET_TOO_COSTLY: 422, ErrorCode.DATASET_ERROR: 422}


class HTTPError(Exception):
    """An error answered as ``{"detail": {"message", "code", ...}}`` with a status code."""

    def __init__(self, status: int, message: str, code: ErrorCode, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"detail": {"message": message, "code": code.value, **extra}}


def http_error_response(_: Request, exc: HTTPError) -> JSONResponse:
    """Exception handler turning ``HTTPError`` into its JSON response."""
    return JSONResponse(exc.body, status_code=exc.status)


def _env_error(exc: EnvInputError) -> HTTPError:
    return HTTPError(ENV_ERROR_STATUS.get(exc.code, 400), str(exc), exc.code)


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


async def _read_object(request: Request) -> dict[str, Any]:
    limit = request.app.state.settings.max_message_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPError(413, f"Body of {declared} bytes exceeds MAX_MESSAGE_BYTES={limit}", ErrorCode.MESSAGE_TOO_LARGE)
    body = await request.body()
    if len(body) > limit:
        raise HTTPError(
            413, f"Body of {len(body)} bytes exceeds MAX_MESSAGE_BYTES={limit}", ErrorCode.MESSAGE_TOO_LARGE
        )
    if not body.strip():
        return {}
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HTTPError(400, f"Invalid JSON: {exc}", ErrorCode.INVALID_JSON) from None
    if not isinstance(payload, dict):
        raise HTTPError(400, "The body must be a JSON object", ErrorCode.INVALID_JSON)
    return payload


def _validated(model: type[Body], what: str, payload: dict[str, Any]) -> Body:
    """``payload`` as ``model``, or a 422 naming each unknown key and wrong value."""
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise HTTPError(
            422, validation_message(what, exc), ErrorCode.VALIDATION_ERROR, errors=validation_errors(exc)
        ) from None


def _session(registry: SessionRegistry, session_id: str) -> Session:
    session = registry.get(session_id)
    if session is None:
        raise HTTPError(
            404,
            f'Unknown or expired session_id {session_id[:100]!r}; POST /reset with "open_session": true to start one',
            ErrorCode.SESSION_ERROR,
        )
    session.touch()
    return session


def _observation_reply(observation: ReasoningGymObservation, session: Session | None) -> Response:
    reply = observation_payload(observation)
    return _json({**reply, "session_id": session.id} if session is not None else reply)


@router.get("/health")
async def health(request: Request) -> Response:
    """Liveness, capacity (active and maximum sessions) and this replica's totals since it started."""
    registry: SessionRegistry = request.app.state.registry
    pool: WorkerPool = request.app.state.pool
    return _json(
        {
            "status": "healthy",
            "replica": REPLICA,
            "active_sessions": registry.active,
            "max_sessions": registry.max_sessions,
            "active_http_sessions": registry.active_http,
            "max_http_sessions": registry.max_http_sessions,
            "session_idle_timeout_s": registry.idle_timeout_s,
            "reaped_sessions": registry.reaped_total,
            "sessions_total": registry.opened_total,
            "episodes_total": request.app.state.episodes.total,
            "dataset_workers": pool.size,
            "dataset_worker_restarts": pool.restarts,
        }
    )


@router.get("/schema")
async def schema() -> Response:
    """JSON schemas of the action, observations and state."""
    observation = ReasoningGymObservation.model_json_schema()
    return _json(
        {
            "action": ReasoningGymAction.model_json_schema(),
            "observation": observation,
            "reset_observation": observation,
            "state": State.model_json_schema(),
        }
    )


@router.get("/metadata")
async def metadata() -> Response:
    """Environment name, description and version."""
    return _json(METADATA.model_dump())


@router.get("/datasets")
async def datasets() -> Response:
    """Every dataset name accepted by ``reset(dataset_name=...)``, plus ``composite``."""
    return _json({"datasets": dataset_names(), "composite": "composite"})


@router.post("/reset")
async def reset(request: Request) -> Response:
    """Start an episode; body: reset arguments, plus ``session_id`` to continue an HTTP session or
    ``"open_session": true`` to open one. Without either the call is stateless and holds no slot."""
    registry: SessionRegistry = request.app.state.registry
    body = _validated(ReasoningGymResetRequest, "reset arguments", await _read_object(request))
    if body.session_id is not None:
        session: Session | None = _session(registry, body.session_id)
    elif body.open_session:
        try:
            session = registry.open("http")
        except CapacityError as exc:
            registry.notices.warning("refused HTTP session: %s", exc)
            raise HTTPError(
                503, str(exc), ErrorCode.CAPACITY_REACHED, active_sessions=exc.active, max_sessions=exc.maximum
            ) from None
    else:
        session = None
    env = session.env if session is not None else registry.new_env()
    succeeded = False
    try:
        observation = await env.reset(body)
        succeeded = True
    except EnvInputError as exc:
        raise _env_error(exc) from None
    finally:
        if session is None:
            env.close()
        elif not succeeded and body.session_id is None:
            registry.close(session)  # a failed reset frees the slot it opened
    return _observation_reply(observation, session)


@router.post("/step")
async def step(request: Request) -> Response:
    """Score an answer; body: ``{"action": {"answer": ...}, "session_id": ...}``."""
    body = _validated(ReasoningGymStepRequest, "step request", await _read_object(request))
    if body.session_id is None:
        raise HTTPError(
            409,
            "step() needs a session: POST /reset with \"open_session\": true and pass its 'session_id' "
            "(or use the WebSocket /ws)",
            ErrorCode.SESSION_ERROR,
        )
    session = _session(request.app.state.registry, body.session_id)
    try:
        observation = await session.env.step(body.action)
    except EnvInputError as exc:
        raise _env_error(exc) from None
    return _observation_reply(observation, session)


@router.get("/state")
async def state(request: Request, session_id: str | None = None) -> Response:
    """State of an HTTP session, or of a fresh environment without ``session_id``."""
    if session_id is None:
        return _json(request.app.state.registry.new_env().state.model_dump())
    return _json(_session(request.app.state.registry, session_id).env.state.model_dump())


@router.delete("/sessions/{session_id}")
async def close_session(request: Request, session_id: str) -> Response:
    """Free an HTTP session's slot before the idle reaper would."""
    registry: SessionRegistry = request.app.state.registry
    registry.close(_session(registry, session_id))
    return Response(status_code=204)
