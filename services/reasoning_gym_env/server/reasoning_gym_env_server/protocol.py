"""OpenEnv's session protocol, independent of the transport: frames in, response dicts out."""

from typing import Any

from openenv.core.env_server.serialization import serialize_observation
from pydantic import ValidationError
from reasoning_gym_env import ReasoningGymAction

from .environment import ReasoningGymEnvironment
from .errors import EnvInputError, ErrorCode


def error_frame(message: str, code: ErrorCode, **extra: Any) -> dict[str, Any]:
    """An OpenEnv ``{"type": "error"}`` frame."""
    return {"type": "error", "data": {"message": message, "code": code.value, **extra}}


def parse_action(data: Any) -> ReasoningGymAction:
    """Validate a step payload (the bare action fields); raises ``pydantic.ValidationError``."""
    return ReasoningGymAction.model_validate(data)


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """JSON-safe pydantic error list (the raw one may hold exception objects)."""
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]


async def handle_frame(env: ReasoningGymEnvironment, frame: Any) -> dict[str, Any] | None:
    """Apply one decoded client frame to ``env``; returns the reply, or None for ``close``."""
    if not isinstance(frame, dict):
        return error_frame("A message must be a JSON object with a 'type'", ErrorCode.INVALID_JSON)
    kind = frame.get("type")
    try:
        if kind == "step":
            observation = await env.step(parse_action(frame.get("data")))
            return {"type": "observation", "data": serialize_observation(observation)}
        if kind == "reset":
            data = frame.get("data") or {}
            if not isinstance(data, dict):
                return error_frame("reset 'data' must be an object of keyword arguments", ErrorCode.VALIDATION_ERROR)
            observation = await env.reset(**data)
            return {"type": "observation", "data": serialize_observation(observation)}
        if kind == "state":
            return {"type": "state", "data": env.state.model_dump()}
        if kind == "close":
            return None
    except EnvInputError as exc:
        return error_frame(str(exc), exc.code)
    except ValidationError as exc:
        return error_frame("Invalid action", ErrorCode.VALIDATION_ERROR, errors=validation_errors(exc))
    except Exception as exc:  # a server bug must not take the session down
        return error_frame(f"{type(exc).__name__}: {exc}", ErrorCode.EXECUTION_ERROR)
    return error_frame(
        f"Unknown message type {kind!r}; expected one of reset, step, state, close", ErrorCode.UNKNOWN_TYPE
    )
