"""Service configuration, read from environment variables."""

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    """Tunables; ``from_env`` names the variable behind each."""

    port: int = 8000
    inference_url: str = "http://inference:8000"
    inference_model: str = ""  # empty: the first model the inference server lists
    max_concurrent_rollouts: int = 4
    sandbox_root: Path = Path("/sandboxes")
    traces_dir: Path = Path("/data/traces")
    sandbox_uid_base: int = 20000
    network_isolation: bool = True
    upstream_timeout_s: float = 600.0
    opencode_bin: str = "opencode"
    agent_prewarm: bool = True
    agent_spares: int = 1
    agent_port_base: int = 41000

    @classmethod
    def from_env(cls) -> "Settings":
        """PORT, INFERENCE_URL, INFERENCE_MODEL, MAX_CONCURRENT_ROLLOUTS, SANDBOX_ROOT, TRACES_DIR,
        SANDBOX_UID_BASE, SANDBOX_NETWORK_ISOLATION (on/off), UPSTREAM_TIMEOUT_S, OPENCODE_BIN, AGENT_PREWARM (on/off:
        keep a started, warmed-up OpenCode server ready in each free sandbox seat), AGENT_SPARES (seats beyond
        MAX_CONCURRENT_ROLLOUTS, so warm servers are ready while given-back seats warm up again),
        AGENT_PORT_BASE (seat i's server listens on 127.0.0.1:AGENT_PORT_BASE+i)."""
        env = os.environ
        return cls(
            port=int(env.get("PORT", cls.port)),
            inference_url=env.get("INFERENCE_URL", cls.inference_url).rstrip("/"),
            inference_model=env.get("INFERENCE_MODEL", cls.inference_model),
            max_concurrent_rollouts=int(env.get("MAX_CONCURRENT_ROLLOUTS", cls.max_concurrent_rollouts)),
            sandbox_root=Path(env.get("SANDBOX_ROOT", str(cls.sandbox_root))),
            traces_dir=Path(env.get("TRACES_DIR", str(cls.traces_dir))),
            sandbox_uid_base=int(env.get("SANDBOX_UID_BASE", cls.sandbox_uid_base)),
            network_isolation=_switch(env.get("SANDBOX_NETWORK_ISOLATION", "on")),
            upstream_timeout_s=float(env.get("UPSTREAM_TIMEOUT_S", cls.upstream_timeout_s)),
            opencode_bin=env.get("OPENCODE_BIN", cls.opencode_bin),
            agent_prewarm=_switch(env.get("AGENT_PREWARM", "on")),
            agent_spares=int(env.get("AGENT_SPARES", cls.agent_spares)),
            agent_port_base=int(env.get("AGENT_PORT_BASE", cls.agent_port_base)),
        )


def _switch(value: str) -> bool:
    return value.lower() not in ("off", "0", "false", "no")
