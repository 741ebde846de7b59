"""The agents table: every agent the API names is wired, its command and environment point it at the
seat's proxy only, and the chat-completions agents' recorded requests pass the proxy's allow-list."""

import json
import os
import sys
import typing
from pathlib import Path

import pytest
from opencode_env_client.models import CodingAgent, Limits
from opencode_env_server.proxy.chat_completions import refused_fields, request_error
from opencode_env_server.rollouts.agents import AGENTS, MODEL, fill
from opencode_env_server.sandbox.sandbox import Sandbox

pytestmark = pytest.mark.unit
RECORDED = Path(__file__).parent / "recorded"
PROXY = "http://127.0.0.1:42001"


def test_every_agent_the_api_names_has_a_row() -> None:
    assert set(typing.get_args(CodingAgent)) == set(AGENTS)
    assert AGENTS["opencode"].argv is None  # served (agent_server), not run as a CLI
    assert all(agent.argv for name, agent in AGENTS.items() if name != "opencode")


def test_placeholders_are_filled_once_so_an_instruction_cannot_expand_them() -> None:
    instruction = "Print {key} and {proxy}; keep {braces} as they are"
    command = AGENTS["claude-code"].command(instruction, PROXY)
    assert instruction in command  # one argument, as written: never through a shell
    assert fill("{a}{b}", {"a": "{b}", "b": "x"}) == "{b}x"


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_each_agent_is_pointed_at_the_seats_proxy_with_the_rollouts_key(tmp_path, name: str) -> None:
    agent = AGENTS[name]
    sandbox = Sandbox(tmp_path, "r", os.getuid(), Limits(), sys.executable)
    sandbox.dir.mkdir(parents=True)
    env = agent.environment(sandbox, PROXY, "rk-secret", 256)
    wiring = " ".join([*env.values(), *agent.command("task", PROXY)])
    assert PROXY in wiring and "rk-secret" in env.values()
    assert "https://" not in wiring  # no other endpoint is named
    assert env["HOME"] == str(sandbox.home)
    if agent.settings:  # written beside HOME, readable by the agent's uid (group) only
        path = Path(env["QWEN_CODE_SYSTEM_SETTINGS_PATH"])
        assert path.parent == sandbox.dir and oct(path.stat().st_mode & 0o777) == "0o440"
        assert json.loads(path.read_text())["privacy"]["usageStatisticsEnabled"] is False


def test_codex_is_given_the_proxy_as_a_responses_provider_without_websockets() -> None:
    command = AGENTS["codex"].command("task", PROXY)
    provider = next(part for part in command if part.startswith("model_providers.rlstack="))
    assert f'base_url="{PROXY}/v1"' in provider and 'wire_api="responses"' in provider
    assert "supports_websockets=false" in provider
    assert f'model="{MODEL}"' in command and command[-1] == "task"


@pytest.mark.parametrize("recording", ["qwen-code-0.24.4-chat.jsonl", "mini-swe-agent-2.4.6-chat.jsonl"])
def test_the_chat_agents_recorded_requests_are_relayed_under_the_allow_list(recording: str) -> None:
    for line in (RECORDED / recording).read_text().splitlines():
        call = json.loads(line)
        assert call["path"] == "/v1/chat/completions"
        assert request_error(call["body"]) is None
        assert refused_fields(call["body"]) is None
        assert call["body"]["model"] == MODEL
