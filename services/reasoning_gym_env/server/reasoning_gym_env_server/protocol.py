"""OpenEnv's session protocol, independent of the transport: frames in, response dicts out.

Every input is validated against its wire model (``reasoning_gym_env.models``) before the
environment is called: a frame, a reset's arguments and a step's action each reject unknown keys
and wrong types with an error that names them.
"""

from typing import Any

from pydantic import ValidationError
from reasoning_gym_env import ReasoningGymAction, ReasoningGymObservation, ReasoningGymReset

from .environment import BARE_RESET, ReasoningGymEnvironment
from .errors import EnvInputError, ErrorCode

# The keys a client frame may carry, by its type (upstream's WS message models forbid the rest).
FRAME_KEYS = {"reset": {"type", "data"}, "step": {"type", "data"}, "state": {"type"}, "close": {"type"}}


def error_frame(message: str, code: ErrorCode, **extra: Any) -> dict[str, Any]:
    """An OpenEnv ``{"type": "error"}`` frame."""
    return {"type": "error", "data": {"message": message, "code": code.value, **extra}}


def parse_action(data: Any) -> ReasoningGymAction:
    """Validate a step payload (the bare action fields); raises ``pydantic.ValidationError``."""
    return ReasoningGymAction.model_validate(data)


def parse_reset(data: Any) -> ReasoningGymReset:
    """Validate reset arguments (absent or ``{}``: a bare reset); raises ``pydantic.ValidationError``."""
    return BARE_RESET if data is None or data == {} else ReasoningGymReset.model_validate(data)


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """JSON-safe pydantic error list (the raw one may hold exception objects)."""
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]


def validation_message(what: str, exc: ValidationError) -> str:
    """One line naming each offending key: ``Invalid reset arguments: 'self': unknown key; ...``."""
    problems = []
    for error in exc.errors()[:10]:
        where = ".".join(str(part) for part in error["loc"]) or "(body)"
        problem = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        problems.append(f"{where[:100]!r}: {problem}")
    return f"Invalid {what}: {'; '.join(problems)}"


def observation_payload(observation: ReasoningGymObservation) -> dict[str, Any]:
    """The observation as OpenEnv's ``serialize_observation`` writes it, without pydantic's dump
    (this runs twice per episode)."""
    payload: dict[str, Any] = {
        "observation": {
            "metadata": observation.metadata,
            "question": observation.question,
            "score": observation.score,
            "correct_answer": observation.correct_answer,
            "dataset_metadata": observation.dataset_metadata,
        },
        "reward": observation.reward,
        "done": observation.done,
    }
    if observation.metadata:
        payload["metadata"] = observation.metadata
    return payload


async def handle_frame(env: ReasoningGymEnvironment, frame: Any) -> dict[str, Any] | None:
    """Apply one decoded client frame to ``env``; returns the reply, or None for ``close``."""
    if not isinstance(frame, dict):
        return error_frame("A message must be a JSON object with a 'type'", ErrorCode.INVALID_JSON)
    kind = frame.get("type")
    allowed = FRAME_KEYS.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        return error_frame(
            f"Unknown message type {str(kind)[:100]!r}; expected one of reset, step, state, close",
            ErrorCode.UNKNOWN_TYPE,
        )
    if not frame.keys() <= allowed:
        unknown = sorted(str(key)[:100] for key in frame.keys() - allowed)[:10]
        return error_frame(
            f"Unknown keys {unknown} in a '{kind}' message; allowed: {', '.join(sorted(allowed))}",
            ErrorCode.VALIDATION_ERROR,
        )
    try:
        if kind in ("step", "reset"):
            parse, what = (parse_action, "action") if kind == "step" else (parse_reset, "reset arguments")
            try:
                data = parse(frame.get("data"))
            except ValidationError as exc:
                return error_frame(
                    validation_message(what, exc), ErrorCode.VALIDATION_ERROR, errors=validation_errors(exc)
                )
            observation = await (env.step(data) if kind == "step" else env.reset(data))
            return {"type": "observation", "data": observation_payload(observation)}
        if kind == "state":
            return {"type": "state", "data": env.state.model_dump()}
        return None  # close
    except EnvInputError as exc:
        return error_frame(str(exc), exc.code)
    except Exception as exc:  # a server bug must not take the session down
        return error_frame(f"{type(exc).__name__}: {exc}"[:2000], ErrorCode.EXECUTION_ERROR)
