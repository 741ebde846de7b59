"""The coding agents a rollout can run, as data: how each is started, pointed at its seat's proxy and
kept offline (no update check, telemetry or other traffic; the firewall stops any that is left).

Every agent runs as its seat's uid in the rollout's sandbox, with the same limits, firewall and
verification; the model it is given is ``MODEL`` and its key is the rollout's proxy key. OpenCode has
a server mode (``agent_server``: warm seats); the others run as one CLI process per rollout, whose
exit code is the agent's (packages and dialects: the service README, "Agents"). Placeholders in
``argv`` and ``env``: ``{proxy}`` the seat's proxy origin (``http://127.0.0.1:PORT``), ``{key}`` the
rollout's key, ``{instruction}`` the task, ``{settings}`` the path of the agent's settings file,
``{output_tokens}`` the per-turn token cap.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from ..sandbox.sandbox import Sandbox

MODEL = "policy"  # no slash: harnesses split model names at one; the proxy sends the served name upstream


@dataclass(frozen=True)
class Agent:
    """One agent's wiring. ``argv`` is None for OpenCode, which is served (``agent_server``)."""

    name: str
    env: Mapping[str, str]
    argv: tuple[str, ...] | None = None
    settings: Mapping[str, object] = field(default_factory=dict)  # written as JSON to a private file

    def environment(self, sandbox: Sandbox, proxy: str, key: str, output_tokens: int) -> dict[str, str]:
        """The agent's environment in ``sandbox`` (its settings file, if it has one, written first:
        beside HOME, not in it, readable by its uid only)."""
        values = {"proxy": proxy, "key": key, "output_tokens": str(output_tokens), "settings": ""}
        if self.settings:
            data = orjson.dumps(self.settings, option=orjson.OPT_INDENT_2)
            values["settings"] = str(sandbox.write_private(f"{self.name}-settings.json", data, 0o440))
        return sandbox.env({name: fill(value, values) for name, value in self.env.items()})

    def command(self, instruction: str, proxy: str) -> list[str]:
        """The CLI run of a task (one argument each, never through a shell)."""
        return [fill(part, {"proxy": proxy, "instruction": instruction}) for part in self.argv or ()]


def fill(template: str, values: dict[str, str]) -> str:
    """``template`` with each ``{name}`` of ``values`` replaced, in one pass (a value that holds a
    placeholder, such as an instruction, is not expanded again)."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


# OpenCode without the network: no update check, models.dev fetch, LSP or plugin download, sharing
# (also set for the commands a harness runs in a rollout's sandbox, ``api.sandbox_operations``).
OPENCODE_OFFLINE = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
}
CODEX_PROVIDER = (
    'model_providers.rlstack={name="rlstack", base_url="{proxy}/v1", env_key="RLSTACK_API_KEY", '
    'wire_api="responses", supports_websockets=false}'
)

AGENTS: dict[str, Agent] = {
    agent.name: agent
    for agent in (
        Agent(
            "opencode",
            # Its opencode.json (provider, model, no sharing or LSP) is written by ``opencode``.
            env={
                **OPENCODE_OFFLINE,
                "OPENAI_API_KEY": "{key}",
                "OPENAI_BASE_URL": "{proxy}/v1",
            },
        ),
        Agent(
            "claude-code",
            env={
                "ANTHROPIC_BASE_URL": "{proxy}",
                "ANTHROPIC_API_KEY": "{key}",
                "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "{output_tokens}",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_ERROR_REPORTING": "1",
            },
            argv=(
                "claude",
                "-p",
                "{instruction}",
                "--model",
                MODEL,
                "--dangerously-skip-permissions",
                "--output-format",
                "stream-json",
                "--verbose",
            ),
        ),
        Agent(
            "codex",
            env={"RLSTACK_API_KEY": "{key}"},
            argv=(
                "codex",
                "exec",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",  # the rollout's sandbox is the sandbox
                "--json",
                "-c",
                f'model="{MODEL}"',
                "-c",
                'model_provider="rlstack"',
                "-c",
                CODEX_PROVIDER,
                "-c",
                "check_for_update_on_startup=false",
                "-c",
                'web_search="disabled"',
                "-c",
                "analytics.enabled=false",
                "-c",
                "feedback.enabled=false",
                "{instruction}",
            ),
        ),
        Agent(
            "mini-swe-agent",
            env={
                "OPENAI_API_BASE": "{proxy}/v1",
                "OPENAI_API_KEY": "{key}",
                "MSWEA_CONFIGURED": "true",
                "MSWEA_COST_TRACKING": "ignore_errors",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            },
            argv=("mini", "-m", f"openai/{MODEL}", "-t", "{instruction}", "-y", "-l", "0", "--exit-immediately"),
        ),
        Agent(
            "qwen-code",
            env={
                "OPENAI_BASE_URL": "{proxy}/v1",
                "OPENAI_API_KEY": "{key}",
                "OPENAI_MODEL": MODEL,
                "QWEN_CODE_SYSTEM_SETTINGS_PATH": "{settings}",
            },
            argv=("qwen", "-p", "{instruction}", "--yolo", "--output-format", "stream-json"),
            settings={
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
            },
        ),
    )
}
