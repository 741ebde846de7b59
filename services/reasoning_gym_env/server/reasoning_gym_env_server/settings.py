"""Server configuration, read from environment variables."""

import os
from dataclasses import dataclass


def _env_number(name: str, default: float, kind: type = int):
    """The variable ``name`` parsed as ``kind``, or ``default`` when unset; exits on a bad value."""
    raw = os.environ.get(name, "")
    try:
        return kind(raw) if raw else default
    except ValueError:
        raise SystemExit(f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}") from None


@dataclass(frozen=True)
class Settings:
    """Tunables of the server; ``from_env`` documents the variable behind each."""

    host: str = "0.0.0.0"
    port: int = 8000
    max_concurrent_envs: int = 64
    max_http_sessions: int = 16
    session_idle_timeout_s: float = 900.0
    max_message_bytes: int = 1 << 20
    dataset_workers: int = 2
    dataset_build_timeout_s: float = 10.0
    dataset_build_memory_mb: int = 512
    max_dataset_size: int = 1_000_000
    log_lines_per_minute: int = 30
    log_level: str = "info"

    @classmethod
    def from_env(cls) -> "Settings":
        """Read every setting from its variable (unset: the default above).

        - HOST, PORT: where to listen.
        - MAX_CONCURRENT_ENVS: session slots (WebSocket connections plus HTTP sessions).
        - MAX_HTTP_SESSIONS: how many of those slots HTTP sessions (``open_session``) may hold.
        - SESSION_IDLE_TIMEOUT_S: a session without messages for this long is closed.
        - MAX_MESSAGE_BYTES: largest request frame or body; also the largest question served.
        - DATASET_WORKERS: worker processes that build datasets, generate questions and score.
        - DATASET_BUILD_TIMEOUT_S: deadline of one worker call (build a dataset and generate its
          next questions, or score an answer); a worker past it is killed.
        - DATASET_BUILD_MEMORY_MB: address space a worker may add to its start-up size (RLIMIT_AS).
        - MAX_DATASET_SIZE: largest ``size`` a reset may ask for.
        - LOG_LINES_PER_MINUTE: warnings about bad requests and killed workers logged per minute;
          the rest are counted in one "suppressed" line.
        - LOG_LEVEL: uvicorn and server log level.
        """
        settings = cls(
            host=os.environ.get("HOST", cls.host),
            port=_env_number("PORT", cls.port),
            max_concurrent_envs=_env_number("MAX_CONCURRENT_ENVS", cls.max_concurrent_envs),
            max_http_sessions=_env_number("MAX_HTTP_SESSIONS", cls.max_http_sessions),
            session_idle_timeout_s=_env_number("SESSION_IDLE_TIMEOUT_S", cls.session_idle_timeout_s, float),
            max_message_bytes=_env_number("MAX_MESSAGE_BYTES", cls.max_message_bytes),
            dataset_workers=_env_number("DATASET_WORKERS", cls.dataset_workers),
            dataset_build_timeout_s=_env_number("DATASET_BUILD_TIMEOUT_S", cls.dataset_build_timeout_s, float),
            dataset_build_memory_mb=_env_number("DATASET_BUILD_MEMORY_MB", cls.dataset_build_memory_mb),
            max_dataset_size=_env_number("MAX_DATASET_SIZE", cls.max_dataset_size),
            log_lines_per_minute=_env_number("LOG_LINES_PER_MINUTE", cls.log_lines_per_minute),
            log_level=os.environ.get("LOG_LEVEL", cls.log_level).lower(),
        )
        for name, value in (
            ("MAX_CONCURRENT_ENVS", settings.max_concurrent_envs),
            ("DATASET_WORKERS", settings.dataset_workers),
            ("DATASET_BUILD_MEMORY_MB", settings.dataset_build_memory_mb),
            ("MAX_DATASET_SIZE", settings.max_dataset_size),
        ):
            if value < 1:
                raise SystemExit(f"{name} must be at least 1")
        if settings.max_http_sessions < 0 or settings.log_lines_per_minute < 0:
            raise SystemExit("MAX_HTTP_SESSIONS and LOG_LINES_PER_MINUTE must not be negative")
        if settings.session_idle_timeout_s <= 0 or settings.dataset_build_timeout_s <= 0:
            raise SystemExit("SESSION_IDLE_TIMEOUT_S and DATASET_BUILD_TIMEOUT_S must be positive")
        return settings
