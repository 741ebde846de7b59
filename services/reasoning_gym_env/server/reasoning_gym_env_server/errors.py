"""Error codes and exceptions shared by the HTTP and WebSocket front ends."""

from enum import Enum


class ErrorCode(str, Enum):
    """WebSocket error codes: upstream OpenEnv's ``WSErrorCode`` values plus our own."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    SESSION_ERROR = "SESSION_ERROR"
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    SESSION_EXPIRED = "SESSION_EXPIRED"


class EnvInputError(ValueError):
    """The client asked for something the environment cannot do (bad arguments, wrong order)."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.VALIDATION_ERROR) -> None:
        super().__init__(message)
        self.code = code


class CapacityError(RuntimeError):
    """No session slot is free."""

    def __init__(self, active: int, maximum: int) -> None:
        super().__init__(
            f"Server at capacity: {active}/{maximum} sessions active. "
            "Close idle sessions or raise MAX_CONCURRENT_ENVS."
        )
        self.active = active
        self.maximum = maximum
