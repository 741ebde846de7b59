"""How OpenCode is configured and started for one rollout."""

import json
from typing import Any

from ..sandbox.sandbox import Sandbox
from .agents import AGENTS, MODEL

PROVIDER = "rlstack"


def opencode_config(proxy_base_url: str, api_key: str, output_tokens: int) -> dict[str, Any]:
    """opencode.json: one OpenAI-compatible provider (the proxy), no updates, sharing, title agent or web."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "rlstack proxy",
                "options": {"baseURL": proxy_base_url, "apiKey": api_key, "timeout": 600_000},
                "models": {
                    MODEL: {"name": MODEL, "tool_call": True, "limit": {"context": 32768, "output": output_tokens}}
                },
            }
        },
        "model": f"{PROVIDER}/{MODEL}",
        "autoupdate": False,
        "share": "disabled",
        "lsp": False,
        "agent": {"title": {"disable": True}},
        "tools": {"webfetch": False, "question": False},
    }


def prepare(sandbox: Sandbox, proxy: str, api_key: str, output_tokens: int, server_password: str) -> dict[str, str]:
    """Write the config beside (not inside) the sandbox's HOME, readable by its uid only; returns
    the agent's environment (``agents.AGENTS["opencode"]``'s, with the config and server password)."""
    config = json.dumps(opencode_config(f"{proxy}/v1", api_key, output_tokens), indent=2).encode()
    path = sandbox.write_private("opencode.json", config, 0o440)
    return {
        **AGENTS["opencode"].environment(sandbox, proxy, api_key, output_tokens),
        "OPENCODE_CONFIG": str(path),
        # Basic auth on the agent's server: a fence beside the firewall and the listener check.
        "OPENCODE_SERVER_PASSWORD": server_password,
    }


def serve_command(binary: str, port: int) -> list[str]:
    """OpenCode's server on a loopback port, without external plugins (``--pure``)."""
    return [binary, "serve", "--pure", "--port", str(port), "--hostname", "127.0.0.1"]
