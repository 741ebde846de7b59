"""Client of the stack's OpenCode environment service (imports nothing from the server).

``opencode_env_client.models`` is the service's wire contract; the server imports it too, without
the client's dependencies, so the HTTP client and the harness sessions are loaded on first use.
"""

from typing import Any

_LAZY = {
    "OpenCodeEnvClient": "client",
    "OpenCodeEnvError": "client",
    "ServiceBusyError": "client",
    "OpenCodeServiceSession": "harness",
    "OpenCodeServiceSessionFactory": "harness",
    "RolloutNotScorable": "harness",
    "ReplicaPool": "replicas",
    "RemoteSandboxBackend": "remote_sandbox",
    "RemoteSandbox": "remote_sandbox",
    "ServiceTracedSessionFactory": "upstream_sessions",
}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'opencode_env_client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
