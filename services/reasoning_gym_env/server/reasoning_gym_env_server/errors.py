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
    DATASET_TOO_COSTLY = "DATASET_TOO_COSTLY"
    DATASET_ERROR = "DATASET_ERROR"


class EnvInputError(ValueError):
    """The client asked for something the environment cannot do (bad arguments, wrong order)."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.VALIDATION_ERROR) -> None:
        super().__init__(message)
        self.code = code


class DatasetTooCostly(EnvInputError):
    """A worker call overran its deadline or memory bound, or produced a question over the size limit."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.DATASET_TOO_COSTLY)


class DatasetError(EnvInputError):
    """reasoning-gym raised something other than a config error while building, generating or scoring."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.DATASET_ERROR)


class CapacityError(RuntimeError):
    """No session slot is free."""

    def __init__(self, active: int, maximum: int, setting: str = "MAX_CONCURRENT_ENVS", kind: str = "sessions") -> None:
        super().__init__(
            f"Server at capacity: {active}/{maximum} {kind} active. Close idle sessions or raise {setting}."
        )
        self.active = active
        self.maximum = maximum
