"""The OpenCode env's HTTP API and OpenEnv protocol in-process (external-agent rollouts: no OpenCode
process), and the mapping of upstream's ``run_rollout`` arguments."""

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from opencode_env_client.models import (
    CreatedRollout,
    Health,
    OpenCodeState,
    RolloutSummary,
    RunRolloutArguments,
    Verification,
)
from opencode_env_server.api.run_rollout import request_for
from opencode_env_server.app import create_app
from opencode_env_server.settings import Provider, Settings

INSTRUCTION = "Write solution.py."
SYSTEM_PYTHON = (
    "/usr/bin/python3"  # the sandbox uids run the file helpers; the venv's interpreter may be out of their reach
)


def settings(tmp_path: Path, **overrides) -> Settings:
    base = dict(
        network_isolation=False,
        agent_prewarm=False,
        sandbox_root=tmp_path / "sandboxes",
        traces_dir=tmp_path / "traces",
        inference_model="policy-model",
        max_concurrent_rollouts=2,
        max_sessions=2,
        sandbox_uid_base=21000,
        verifier_uid_base=31000,
        helper_python=SYSTEM_PYTHON,
    )
    return Settings(**{**base, **overrides})


@pytest.fixture
def client(tmp_path: Path):
    with TestClient(create_app(settings(tmp_path))) as test_client:
        yield test_client


def external(client: TestClient, **task) -> CreatedRollout:
    response = client.post("/rollouts", json={"task": {"instruction": INSTRUCTION, **task}, "agent": "external"})
    assert response.status_code == 201, response.text
    return CreatedRollout.model_validate(response.json())


def rpc(client: TestClient, method: str, request_id=1, **params) -> dict:
    response = client.post("/mcp", json={"jsonrpc": "2.0", "method": method, "params": params, "id": request_id})
    assert response.status_code == 200
    return response.json()


def test_rollout_lifecycle_answers_in_the_contract_models(client: TestClient) -> None:
    created = external(client, task_id="t", verify_commands=["true", "false"])
    assert created.task_id == "t"
    assert created.model == "policy-model"
    assert created.proxy_base_url.endswith("/v1")
    summary = RolloutSummary.model_validate(client.get(f"/rollouts/{created.rollout_id}").json())
    assert summary.status in ("pending", "running")
    assert not summary.final
    assert client.post(f"/rollouts/{created.rollout_id}/verify").status_code == 409  # still running
    finished = RolloutSummary.model_validate(client.post(f"/rollouts/{created.rollout_id}/finish").json())
    assert finished.status == "completed"
    assert finished.final
    assert RolloutSummary.model_validate(client.post(f"/rollouts/{created.rollout_id}/wait").json()).final
    verification = Verification.model_validate(client.post(f"/rollouts/{created.rollout_id}/verify").json())
    assert verification.reward == 0.5
    assert [r.passed for r in verification.results] == [True, False]
    assert client.get(f"/rollouts/{created.rollout_id}/turns").json() == []
    assert client.delete(f"/rollouts/{created.rollout_id}").status_code == 204
    # Closed: no longer live, still on the traces volume.
    assert client.post(f"/rollouts/{created.rollout_id}/wait").status_code == 404
    archived = RolloutSummary.model_validate(client.get(f"/rollouts/{created.rollout_id}").json())
    assert archived.reward == 0.5
    assert archived.status == "completed"
    assert Health.model_validate(client.get("/health").json()).active_rollouts == 0


def test_bad_requests_get_clear_4xx_and_capacity_503(client: TestClient) -> None:
    assert client.get("/rollouts/nope").status_code == 404
    bad = client.post("/rollouts", json={"task": {"instruction": INSTRUCTION, "bogus": 1}})
    assert bad.status_code == 422
    assert "bogus" in bad.text
    refused = client.post(
        "/rollouts", json={"task": {"instruction": INSTRUCTION}, "upstream_url": "http://10.0.0.1:80"}
    )
    assert refused.status_code == 403
    assert "ALLOWED_UPSTREAMS" in refused.json()["detail"]["message"]
    first, second = external(client), external(client)
    busy = client.post("/rollouts", json={"task": {"instruction": INSTRUCTION}, "agent": "external"})
    assert busy.status_code == 503
    assert busy.json()["detail"]["max_rollouts"] == 2
    for created in (first, second):  # the refused requests cost the live rollouts nothing
        assert client.get(f"/rollouts/{created.rollout_id}").json()["status"] in ("pending", "running")
        client.delete(f"/rollouts/{created.rollout_id}")


def test_mcp_sessions_tools_and_json_rpc_errors(client: TestClient) -> None:
    session = rpc(client, "openenv/session/create")["result"]["session_id"]
    tools = rpc(client, "tools/list", session_id=session)["result"]["tools"]
    assert [t["name"] for t in tools] == ["run_rollout"]
    assert "instruction" in tools[0]["inputSchema"]["properties"]
    assert client.post("/mcp", content=b"{not json").json()["error"]["code"] == -32700
    assert client.post("/mcp", json={"method": "tools/list"}).json()["error"]["code"] == -32600
    assert rpc(client, "resources/list")["error"]["code"] == -32601
    assert (
        rpc(client, "tools/call", name="rm_rf", arguments={}, session_id=session)["error"]["message"]
        == "Tool not found: rm_rf"
    )
    bad = rpc(client, "tools/call", name="run_rollout", arguments={"instruction": "x", "bogus": 1}, session_id=session)
    assert bad["error"]["code"] == -32602
    assert "unknown argument 'bogus'" in bad["error"]["message"]
    missing = rpc(client, "tools/call", name="run_rollout", arguments={}, session_id=session)
    assert missing["error"]["code"] == -32602
    assert "instruction" in missing["error"]["message"]
    assert "unknown session_id" in rpc(client, "tools/list", session_id="nope")["error"]["message"]
    rpc(client, "openenv/session/create")  # the second of MAX_SESSIONS=2
    full = rpc(client, "openenv/session/create")["error"]
    assert full["code"] == -32000
    assert full["data"] == {"active_sessions": 2, "max_sessions": 2}
    assert rpc(client, "openenv/session/close", session_id=session)["result"] == {"session_id": session, "closed": True}
    assert "was closed" in rpc(client, "tools/list", session_id=session)["error"]["message"]
    assert rpc(client, "openenv/session/close")["error"]["code"] == -32602
    assert Health.model_validate(client.get("/health").json()).sessions == 1


def test_ws_attaches_to_an_mcp_session_and_shares_its_state(client: TestClient) -> None:
    session = rpc(client, "openenv/session/create")["result"]["session_id"]
    with client.websocket_connect(f"/ws?session_id={session}") as ws:
        ws.send_json({"type": "reset", "data": {}})
        assert ws.receive_json()["data"]["metadata"]["status"] == "ready"
        ws.send_json({"type": "state"})
        state = OpenCodeState.model_validate(ws.receive_json()["data"])
        ws.send_json({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "openenv/session/create", "id": 7}})
        assert ws.receive_json()["data"] == {"jsonrpc": "2.0", "id": 7, "result": {"session_id": session}}
        ws.send_json({"type": "step", "data": {"type": "call_tool", "tool_name": "run_rollout", "arguments": {"x": 1}}})
        observation = ws.receive_json()["data"]["observation"]
        assert observation["error"]["error_type"] == "invalid_args"
        assert observation["result"] is None
        ws.send_text("{nope")
        assert ws.receive_json()["data"]["code"] == "INVALID_JSON"
        ws.send_json({"type": "dance"})
        assert ws.receive_json()["data"]["code"] == "UNKNOWN_TYPE"
        with client.websocket_connect(f"/ws?session_id={session}") as second:
            assert "already has an attached WebSocket" in second.receive_json()["data"]["message"]
        closing = rpc(client, "openenv/session/close", session_id=session)["result"]
        assert closing == {"session_id": session, "closed": False, "closing": True}
        ws.send_json({"type": "close"})
    assert state.episode_id
    assert "was closed" in rpc(client, "tools/list", session_id=session)["error"]["message"]
    with client.websocket_connect("/ws?session_id=nope") as ws:
        assert ws.receive_json()["data"]["code"] == "SESSION_ERROR"


def test_idle_sessions_expire_with_a_clear_error(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path, session_idle_timeout_s=0.2))) as client:
        session = rpc(client, "openenv/session/create")["result"]["session_id"]
        deadline = time.monotonic() + 10
        while client.get("/health").json()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        error = rpc(client, "tools/list", session_id=session)["error"]
        assert error["code"] == -32602
        assert "expired after 0.2s" in error["message"]


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (
            {},
            dict(
                upstream_url=None, upstream_api_key=None, model=None, record_turns=True, top_logprobs=5, thinking=True
            ),
        ),
        (
            {"endpoint": "vllm", "base_url": "http://inference:8000/v1", "api_key": "intercepted"},
            dict(upstream_url=None, upstream_api_key=None, model=None, thinking=False),
        ),
        (
            {"base_url": "https://llm.example/v1", "api_key": "sk-1", "model": "m", "mode": "black_box"},
            dict(
                upstream_url="https://llm.example/v1",
                upstream_api_key="sk-1",
                model="m",
                record_turns=False,
                top_logprobs=None,
                thinking=True,
            ),
        ),
        (
            {"endpoint": "openai"},
            dict(upstream_url="https://api.openai.com/v1", upstream_api_key="sk-server", model="gpt-4o-mini"),
        ),
    ],
)
def test_run_rollout_arguments_map_to_a_rollout_request(tmp_path: Path, arguments, expected) -> None:
    providers = {
        "openai": Provider("https://api.openai.com/v1", "sk-server", "gpt-4o-mini"),
        "hf_router": Provider("https://router.huggingface.co/v1"),
    }
    request = request_for(RunRolloutArguments(instruction="x", **arguments), settings(tmp_path, providers=providers))
    thinking = expected.pop("thinking", None)
    for name, value in expected.items():
        assert getattr(request, name) == value, name
    if thinking is not None:
        assert ("chat_template_kwargs" not in request.sampling) == thinking
    assert request.task.limits.max_tokens_per_turn == 4096
    assert request.task.limits.wall_s == 600


def test_run_rollout_argument_edges(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert (
        request_for(RunRolloutArguments(instruction="x", max_tokens_cap=0), s).task.limits.max_tokens_per_turn == 131072
    )
    with pytest.raises(ValueError, match="HF_ROUTER_API_KEY"):
        request_for(RunRolloutArguments(instruction="x", endpoint="hf_router"), s)
    with pytest.raises(Exception, match="endpoint"):
        RunRolloutArguments(instruction="x", endpoint="e2b")
