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
    session_idle_timeout_s: float = 900.0
    max_message_bytes: int = 1 << 20
    log_level: str = "info"

    @classmethod
    def from_env(cls) -> "Settings":
        """HOST, PORT, MAX_CONCURRENT_ENVS, SESSION_IDLE_TIMEOUT_S, MAX_MESSAGE_BYTES, LOG_LEVEL."""
        settings = cls(
            host=os.environ.get("HOST", cls.host),
            port=_env_number("PORT", cls.port),
            max_concurrent_envs=_env_number("MAX_CONCURRENT_ENVS", cls.max_concurrent_envs),
            session_idle_timeout_s=_env_number("SESSION_IDLE_TIMEOUT_S", cls.session_idle_timeout_s, float),
            max_message_bytes=_env_number("MAX_MESSAGE_BYTES", cls.max_message_bytes),
            log_level=os.environ.get("LOG_LEVEL", cls.log_level).lower(),
        )
        if settings.max_concurrent_envs < 1:
            raise SystemExit("MAX_CONCURRENT_ENVS must be at least 1")
        if settings.session_idle_timeout_s <= 0:
            raise SystemExit("SESSION_IDLE_TIMEOUT_S must be positive")
        return settings
