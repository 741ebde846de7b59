"""Upstream OpenEnv's clients against the OpenCode env: ``MCPToolClient`` (``/mcp`` + ``/ws``),
``GenericEnvClient``, sessions shared between the two transports, and an external provider's key.

The inference server runs the scripted fixture model (``bash: echo 'print(input()[::-1])' >
solution.py``, forever); ``RUN_ROLLOUT_MAX_TURNS=3`` ends each rollout after three calls.
"""

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from opencode_env.models import CommandResult, RolloutResult, RolloutTurn
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from testcontainers.core.container import DockerContainer
from websockets.sync.client import connect

from tests.container.test_opencode_env import in_container


def upstream_result(text: str) -> RolloutResult:
    """``text`` validated by upstream's own ``RolloutResult`` (tests/upstream), and holding no field
    upstream's models lack, at any depth."""
    data = json.loads(text)
    result = RolloutResult.model_validate(data)
    assert set(data) <= set(RolloutResult.model_fields), set(data) - set(RolloutResult.model_fields)
    for key, model in (
        ("setup_results", CommandResult),
        ("verify_results", CommandResult),
        ("proxy_turns", RolloutTurn),
    ):
        for item in data.get(key, []):
            assert set(item) <= set(model.model_fields), (key, set(item) - set(model.model_fields))
    return result


def run_rollout_arguments(**overrides: Any) -> dict[str, Any]:
    """Every argument upstream's ``OpenCodeEnv.run_rollout`` sends, with its defaults."""
    arguments = dict(
        endpoint="vllm",
        base_url="http://inference:8000/v1",
        api_key="intercepted",
        model="",
        instruction="Write solution.py that prints its input line reversed.",
        setup=["echo ready > marker.txt"],
        verify=["test -f marker.txt", "test -f missing.txt"],
        task_id="t1",
        mode="transparent_proxy",
        disable_thinking=None,
        max_tokens_cap=4096,
        top_logprobs=5,
        agent_timeout_s=240.0,
        template="",
    )
    return {**arguments, **overrides}


def rpc(url: str, method: str, timeout: float = 30, **params: Any) -> dict:
    return httpx.post(
        f"{url}/mcp", json={"jsonrpc": "2.0", "method": method, "params": params, "id": 1}, timeout=timeout
    ).json()


def sandbox_processes(container: DockerContainer) -> list[str]:
    """Processes of sandbox uids (20000 and up) in the container."""
    ps = in_container(container, "ps", "-eo", "uid=,args=").stdout.splitlines()
    return [line for line in ps if line.split() and int(line.split()[0]) >= 20000]


def test_mcp_tool_client_runs_run_rollout_end_to_end(opencode_env) -> None:
    with MCPToolClient(base_url=opencode_env.url, message_timeout_s=300).sync() as env:
        env.reset()
        assert [t.name for t in env.list_tools()] == ["run_rollout"]
        text = env.call_tool("run_rollout", **run_rollout_arguments())
        with pytest.raises(RuntimeError, match="unknown argument 'bogus'"):
            env.call_tool("run_rollout", **run_rollout_arguments(bogus=1))
    result = upstream_result(text)
    assert result.reward == 0.5, (result.error, result.verify_results, result.agent_log_tail[-600:])
    assert result.task_id == "t1"
    assert result.mode == "transparent_proxy"
    assert result.error is None
    assert [r.exit_code for r in result.setup_results] == [0]
    assert [r.exit_code == 0 for r in result.verify_results] == [True, False]
    assert result.files["solution.py"].strip() == "print(input()[::-1])"
    assert "marker.txt" in result.files
    assert len(result.proxy_turns) == 3
    assert result.wall_s > 0
    for turn in result.proxy_turns:
        assert turn.completion_token_ids
        assert turn.upstream_status == 200
        assert len(turn.completion_tokens) == len(turn.per_token_logps) == len(turn.completion_token_ids)
    assert "".join(result.proxy_turns[0].completion_tokens).strip()  # token texts, not "token_id:N"
    assert not any(t.startswith("token_id:") for t in result.proxy_turns[0].completion_tokens)
    health = httpx.get(f"{opencode_env.url}/health").json()
    assert health["active_rollouts"] == 0
    assert health["sessions"] == 0  # closing the client closed its session


def test_ws_and_mcp_share_one_session_and_errors_leave_others_intact(opencode_env) -> None:
    url = opencode_env.url
    session = rpc(url, "openenv/session/create")["result"]["session_id"]
    other = rpc(url, "openenv/session/create")["result"]["session_id"]
    with connect(url.replace("http://", "ws://") + f"/ws?session_id={session}", max_size=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(ws.recv(timeout=30))["data"]["metadata"]["status"] == "ready"
        called = rpc(
            url,
            "tools/call",
            timeout=300,
            session_id=session,
            name="run_rollout",
            arguments=run_rollout_arguments(task_id="shared", mode="black_box", verify=["test -f solution.py"]),
        )
        result = upstream_result(called["result"]["data"])
        assert result.reward == 1.0
        assert result.proxy_turns == []
        assert result.mode == "black_box"
        ws.send(json.dumps({"type": "state"}))
        state = json.loads(ws.recv(timeout=30))["data"]
        assert state["rollouts_completed"] == 1
        assert state["last_task_id"] == "shared"
        assert state["last_sandbox_id"] == result.sandbox_id
        assert state["last_reward"] == 1.0
    assert rpc(url, "tools/list", session_id="no-such-session")["error"]["code"] == -32602
    assert rpc(url, "no/such/method")["error"]["code"] == -32601
    for live in (session, other):  # bad calls cost the live sessions nothing
        assert rpc(url, "tools/list", session_id=live)["result"]["tools"][0]["name"] == "run_rollout"
        assert rpc(url, "openenv/session/close", session_id=live)["result"]["closed"] is True


def test_generic_env_client_steps_the_tool(opencode_env) -> None:
    with GenericEnvClient(base_url=opencode_env.url, message_timeout_s=300).sync() as env:
        env.reset()
        tools = env.step({"type": "list_tools"}).observation
        assert [t["name"] for t in tools["tools"]] == ["run_rollout"]
        step = env.step(
            {
                "type": "call_tool",
                "tool_name": "run_rollout",
                "arguments": run_rollout_arguments(verify=["test -f solution.py"]),
            }
        )
        assert step.done
        assert step.reward == 1.0
        assert upstream_result(step.observation["result"]["data"]).reward == 1.0


def test_closing_a_session_stops_its_running_rollout_and_leaves_no_process(opencode_env) -> None:
    url = opencode_env.url
    session = rpc(url, "openenv/session/create")["result"]["session_id"]
    answer: dict = {}
    call = threading.Thread(
        target=lambda: answer.update(
            rpc(
                url,
                "tools/call",
                timeout=300,
                session_id=session,
                name="run_rollout",
                arguments=run_rollout_arguments(setup=["sleep 300"]),
            )
        )
    )
    call.start()
    deadline = time.monotonic() + 60
    while not any("sleep 300" in p for p in sandbox_processes(opencode_env)):
        assert time.monotonic() < deadline, "the rollout's setup command never started"
        time.sleep(0.25)
    assert rpc(url, "openenv/session/close", session_id=session)["result"]["closed"] is True
    call.join(60)
    assert "session was closed" in answer["error"]["message"]
    deadline = time.monotonic() + 10
    while sandbox_processes(opencode_env) and any("sleep" in p for p in sandbox_processes(opencode_env)):
        assert time.monotonic() < deadline, sandbox_processes(opencode_env)
        time.sleep(0.25)
    assert httpx.get(f"{url}/health").json()["active_rollouts"] == 0


@pytest.fixture
def provider(opencode_image: str, network) -> DockerContainer:
    """tests/container/fake_provider.py as ``http://provider:9000`` on the test network."""
    script = Path(__file__).with_name("fake_provider.py")
    container = (
        DockerContainer(opencode_image)
        .with_network(network)
        .with_network_aliases("provider")
        .with_volume_mapping(str(script), "/fake_provider.py", "ro")
        .with_command("python3 /fake_provider.py 9000")
    )
    container.start()
    yield container
    container.stop()


def test_an_external_providers_key_reaches_it_and_nothing_else(opencode_env, provider) -> None:
    key = "sk-test-" + "k3y" * 8
    seen = [
        "python3",
        "-c",
        "import urllib.request;print(urllib.request.urlopen('http://provider:9000/seen').read().decode())",
    ]
    result: dict = {}
    call = threading.Thread(
        target=lambda: result.update(
            rpc(
                opencode_env.url,
                "tools/call",
                timeout=300,
                name="run_rollout",
                arguments=run_rollout_arguments(
                    endpoint="",
                    base_url="http://provider:9000/v1",
                    api_key=key,
                    model="provider-model",
                    setup=[],
                    verify=["true"],
                    task_id="ext",
                ),
            )
        )
    )
    call.start()
    deadline = time.monotonic() + 120
    while in_container(opencode_env, *seen).stdout.strip() in ("", "[]"):  # the agent's first call is in flight
        assert time.monotonic() < deadline, result
        assert call.is_alive(), result
        time.sleep(0.25)
    during = in_container(opencode_env, "grep", "-rl", key, "/sandboxes", "/data/traces")
    call.join(300)
    rollout = upstream_result(result["result"]["data"])
    assert rollout.reward == 1.0, rollout.error
    assert rollout.proxy_turns, rollout.error
    assert json.loads(in_container(opencode_env, *seen).stdout)[0] == f"Bearer {key}"
    assert during.returncode == 1, during.stdout
    assert during.stdout == "", during.stdout  # 1: searched, no match
    after = in_container(opencode_env, "grep", "-rl", key, "/data/traces")
    logs = subprocess.run(["docker", "logs", opencode_env.get_wrapped_container().id], capture_output=True, text=True)
    assert after.returncode == 1
    assert key not in logs.stdout + logs.stderr
