"""Service configuration, read from environment variables."""

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from opencode_env_client.models import normalize_upstream


@dataclass(frozen=True)
class Provider:
    """Defaults of one of upstream's ``run_rollout`` endpoints (``endpoint="openai"`` or ``"hf_router"``)."""

    base_url: str
    api_key: str = ""
    model: str = ""


def _providers(env: os._Environ | dict[str, str]) -> dict[str, Provider]:
    """OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL and HF_ROUTER_BASE_URL / HF_ROUTER_API_KEY (or
    HF_TOKEN) / HF_ROUTER_MODEL, with upstream's defaults."""
    return {
        "openai": Provider(
            env.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
            env.get("OPENAI_API_KEY", ""),
            env.get("OPENAI_MODEL", "gpt-4o-mini"),
        ),
        "hf_router": Provider(
            env.get("HF_ROUTER_BASE_URL", "https://router.huggingface.co/v1"),
            env.get("HF_ROUTER_API_KEY", env.get("HF_TOKEN", "")),
            env.get("HF_ROUTER_MODEL", ""),
        ),
    }


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
    verifier_uid_base: int = 30000
    network_isolation: bool = True
    upstream_timeout_s: float = 600.0
    opencode_bin: str = "opencode"
    helper_python: str = sys.executable
    agent_prewarm: bool = True
    agent_spares: int = 1
    agent_port_base: int = 41000
    sandbox_proxy_port_base: int = 24000
    allowed_upstreams: tuple[str, ...] = ()  # empty: only inference_url
    max_body_bytes: int = 16 << 20
    api_max_body_bytes: int = 32 << 20
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    max_sessions: int = 16
    session_idle_timeout_s: float = 900.0
    run_rollout_max_turns: int = 64
    finished_rollout_ttl_s: float = 600.0
    providers: dict[str, Provider] = field(default_factory=lambda: _providers({}))
    setup_network_allow: tuple[tuple[str, int], ...] = ()  # empty: setup commands are isolated too

    @classmethod
    def from_env(cls) -> "Settings":
        """PORT, INFERENCE_URL, INFERENCE_MODEL, MAX_CONCURRENT_ROLLOUTS, SANDBOX_ROOT, TRACES_DIR,
        SANDBOX_UID_BASE (seat i's agent runs as SANDBOX_UID_BASE+i), VERIFIER_UID_BASE (seat i's held-out
        checks run as VERIFIER_UID_BASE+i, a uid its agent never had), SANDBOX_NETWORK_ISOLATION (on/off),
        UPSTREAM_TIMEOUT_S, OPENCODE_BIN, SANDBOX_HELPER_PYTHON (the interpreter that places,
        lists and copies a sandbox's files as its uid; default: the service's), AGENT_PREWARM (on/off:
        keep a started, warmed-up OpenCode server ready in each free sandbox seat), AGENT_SPARES (seats beyond
        MAX_CONCURRENT_ROLLOUTS, so warm servers are ready while given-back seats warm up again),
        AGENT_PORT_BASE (seat i's server listens on 127.0.0.1:AGENT_PORT_BASE+i), SANDBOX_PROXY_PORT_BASE
        (seat i's sandbox reaches the proxy, and nothing else, on 127.0.0.1:SANDBOX_PROXY_PORT_BASE+i),
        ALLOWED_UPSTREAMS (comma-separated base URLs a rollout request may name as ``upstream_url``;
        INFERENCE_URL is always allowed), PROXY_MAX_BODY_BYTES (largest chat completion request),
        API_MAX_BODY_BYTES (largest request body of every other route: 413 beyond), HTTP_HEADER_TIMEOUT_S
        (a connection must complete each request's headers within this), HTTP_IDLE_TIMEOUT_S (a request body
        that sends nothing for this long is answered 408),
        MAX_SESSIONS (OpenEnv sessions over /mcp and /ws at once), SESSION_IDLE_TIMEOUT_S (an OpenEnv
        session with no call for this long, no WebSocket and no running rollout is closed),
        RUN_ROLLOUT_MAX_TURNS (model calls of a ``run_rollout`` rollout; upstream has no cap),
        FINISHED_ROLLOUT_TTL_S (an ended rollout no client closed for this long is closed: its client
        died), SETUP_NETWORK_ALLOW (comma-separated ``host[:port]`` (port 443 if left out) that a rollout's
        setup commands may reach, with the DNS resolver, before the agent starts; empty, the default:
        none), and the ``run_rollout`` providers (see ``_providers``)."""
        env = os.environ
        settings = cls(
            port=int(env.get("PORT", cls.port)),
            inference_url=env.get("INFERENCE_URL", cls.inference_url).rstrip("/"),
            inference_model=env.get("INFERENCE_MODEL", cls.inference_model),
            max_concurrent_rollouts=int(env.get("MAX_CONCURRENT_ROLLOUTS", cls.max_concurrent_rollouts)),
            sandbox_root=Path(env.get("SANDBOX_ROOT", str(cls.sandbox_root))),
            traces_dir=Path(env.get("TRACES_DIR", str(cls.traces_dir))),
            sandbox_uid_base=int(env.get("SANDBOX_UID_BASE", cls.sandbox_uid_base)),
            verifier_uid_base=int(env.get("VERIFIER_UID_BASE", cls.verifier_uid_base)),
            network_isolation=_switch(env.get("SANDBOX_NETWORK_ISOLATION", "on")),
            upstream_timeout_s=float(env.get("UPSTREAM_TIMEOUT_S", cls.upstream_timeout_s)),
            opencode_bin=env.get("OPENCODE_BIN", cls.opencode_bin),
            helper_python=env.get("SANDBOX_HELPER_PYTHON", cls.helper_python),
            agent_prewarm=_switch(env.get("AGENT_PREWARM", "on")),
            agent_spares=int(env.get("AGENT_SPARES", cls.agent_spares)),
            agent_port_base=int(env.get("AGENT_PORT_BASE", cls.agent_port_base)),
            sandbox_proxy_port_base=int(env.get("SANDBOX_PROXY_PORT_BASE", cls.sandbox_proxy_port_base)),
            allowed_upstreams=tuple(
                normalize_upstream(u) for u in env.get("ALLOWED_UPSTREAMS", "").split(",") if u.strip()
            ),
            max_body_bytes=int(env.get("PROXY_MAX_BODY_BYTES", cls.max_body_bytes)),
            api_max_body_bytes=int(env.get("API_MAX_BODY_BYTES", cls.api_max_body_bytes)),
            header_timeout_s=float(env.get("HTTP_HEADER_TIMEOUT_S", cls.header_timeout_s)),
            idle_timeout_s=float(env.get("HTTP_IDLE_TIMEOUT_S", cls.idle_timeout_s)),
            max_sessions=int(env.get("MAX_SESSIONS", cls.max_sessions)),
            session_idle_timeout_s=float(env.get("SESSION_IDLE_TIMEOUT_S", cls.session_idle_timeout_s)),
            run_rollout_max_turns=int(env.get("RUN_ROLLOUT_MAX_TURNS", cls.run_rollout_max_turns)),
            finished_rollout_ttl_s=float(env.get("FINISHED_ROLLOUT_TTL_S", cls.finished_rollout_ttl_s)),
            providers=_providers(env),
            setup_network_allow=parse_destinations(env.get("SETUP_NETWORK_ALLOW", "")),
        )
        settings.check()
        return settings

    @property
    def seats(self) -> int:
        """Sandbox seats: one uid, agent port and sandbox proxy port each."""
        return self.max_concurrent_rollouts + (self.agent_spares if self.agent_prewarm else 0)

    def seat_uid(self, seat: int) -> int:
        return self.sandbox_uid_base + seat

    def verifier_uid(self, seat: int) -> int:
        """The uid seat ``seat``'s held-out checks run as (never its agent's)."""
        return self.verifier_uid_base + seat

    @property
    def all_uids(self) -> list[int]:
        """Every uid a sandbox process may run as: the seats' and their verifiers'."""
        return [f(seat) for f in (self.seat_uid, self.verifier_uid) for seat in range(self.seats)]

    def sandbox_proxy_port(self, seat: int) -> int:
        return self.sandbox_proxy_port_base + seat

    def sandbox_proxy_origin(self, seat: int) -> str:
        """The proxy as the seat's sandbox reaches it (an agent's base URL adds its dialect's path)."""
        return f"http://127.0.0.1:{self.sandbox_proxy_port(seat)}"

    def seat_of_proxy_port(self, port: int) -> int | None:
        """The seat whose sandbox proxy listens on ``port``, or None for the service's own port."""
        seat = port - self.sandbox_proxy_port_base
        return seat if 0 <= seat < self.seats and port != self.port else None

    def upstream_allowed(self, url: str) -> bool:
        """Whether a caller may send a rollout's model calls to ``url``."""
        return normalize_upstream(url) in {normalize_upstream(self.inference_url), *self.allowed_upstreams}

    def check(self) -> None:
        """Refuse settings whose port ranges overlap (a sandbox could then reach the API)."""
        ranges = {
            "PORT": range(self.port, self.port + 1),
            "AGENT_PORT_BASE": range(self.agent_port_base, self.agent_port_base + self.seats),
            "SANDBOX_PROXY_PORT_BASE": range(self.sandbox_proxy_port_base, self.sandbox_proxy_port_base + self.seats),
        }
        names = list(ranges)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if set(ranges[a]) & set(ranges[b]):
                    raise SystemExit(f"{a} and {b} overlap for {self.seats} seats; move one of them")
        seat_uids = range(self.sandbox_uid_base, self.sandbox_uid_base + self.seats)
        if set(seat_uids) & set(range(self.verifier_uid_base, self.verifier_uid_base + self.seats)):
            raise SystemExit(f"SANDBOX_UID_BASE and VERIFIER_UID_BASE overlap for {self.seats} seats; move one of them")
        if min(self.sandbox_uid_base, self.verifier_uid_base) < 1000:
            raise SystemExit("SANDBOX_UID_BASE and VERIFIER_UID_BASE must be >= 1000 (no system uid)")
        if self.max_concurrent_rollouts < 1 or self.max_body_bytes < 1024 or self.max_sessions < 1:
            raise SystemExit("MAX_CONCURRENT_ROLLOUTS and MAX_SESSIONS must be >= 1 and PROXY_MAX_BODY_BYTES >= 1024")
        if self.session_idle_timeout_s <= 0:
            raise SystemExit("SESSION_IDLE_TIMEOUT_S must be > 0")


def parse_destinations(value: str) -> tuple[tuple[str, int], ...]:
    """``host[:port]`` entries, comma-separated (port 443 when left out)."""
    destinations = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        host, _, port = entry.rpartition(":") if ":" in entry else (entry, "", "443")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
            raise SystemExit(f"SETUP_NETWORK_ALLOW: {entry!r} is not host[:port]")
        destinations.append((host, int(port)))
    return tuple(destinations)


def _switch(value: str) -> bool:
    return value.lower() not in ("off", "0", "false", "no")
