"""``RemoteSandboxBackend`` under upstream's unchanged ``OpenCodeSessionFactory``, against a recorded
fake of the service: what reaches the service, in which order, and what the harness reads back."""

import json
import pickle
from dataclasses import asdict

import httpx
import pytest
from opencode_env.config import OpenCodeConfig
from opencode_env.harness import OpenCodeSessionFactory
from opencode_env.task import OpenCodeTask
from opencode_env_client import (
    OpenCodeEnvClient,
    OpenCodeServiceSession,
    RemoteSandboxBackend,
    RolloutNotScorable,
    ServiceTracedSessionFactory,
)
from opencode_env_client.models import CreatedRollout, RolloutSummary, Task, Turn
from opencode_env_client.remote_sandbox import parse_proxy_command, upstream_trace_records
from openenv.core.harness import TrainableSession, TrainingTrace, VerifyResult

SANDBOX_PROXY = "http://127.0.0.1:24001/v1"
TURN = Turn(
    turn=0,
    request={"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]},
    response={"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]},
    prompt_token_ids=[1, 2, 3],
    completion_token_ids=[7, 8],
    per_token_logps=[-0.25, -0.5],
    finish_reason="stop",
    latency_s=0.1,
    weight_version="step-3",
    stream=False,
    trainable=True,
    completion_tokens=["o", "k"],
)
TRACE = {
    "schema_version": 1,
    "turns": [
        {
            "node_id": "r1:0",
            "prompt_token_ids": [1, 2, 3],
            "completion_token_ids": [7, 8],
            "per_token_logps": [-0.25, -0.5],
            "loss_mask": [0, 0, 0, 1, 1],
            "request": TURN.request,
            "response": TURN.response,
            "metadata": {"turn": 0, "trainable": True, "weight_version": "step-3"},
        }
    ],
}


class FakeService:
    """Answers the rollouts and sandbox API like the service; logs ``(method, path, body)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict]] = []
        self.files: dict[str, str] = {}
        self.final = False

    def summary(self) -> dict:
        status = "completed" if self.final else "running"
        return RolloutSummary(
            rollout_id="r1",
            status=status,
            final=self.final,
            agent="external",
            upstream_url="http://inference:8000",
            created_at=0.0,
        ).model_dump()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        path = request.url.path
        self.calls.append((request.method, path, body))
        context = "verification" if self.final else "agent"
        if path == "/rollouts":
            created = CreatedRollout(
                rollout_id="r1",
                api_key="rollout-key",
                status="pending",
                proxy_base_url="http://opencode-env:8000/v1",
                model="policy",
                sandbox_proxy_base_url=SANDBOX_PROXY,
            )
            return httpx.Response(201, json=created.model_dump())
        if path == "/rollouts/r1" and request.method == "GET":
            return httpx.Response(200, json=self.summary())
        if path == "/rollouts/r1/finish":
            self.final = True
            return httpx.Response(200, json=self.summary())
        if path == "/rollouts/r1/wait":
            return httpx.Response(200, json=self.summary())
        if path == "/rollouts/r1/turns":
            return httpx.Response(200, json=[asdict(TURN)])
        if path == "/rollouts/r1/trace":
            return httpx.Response(200, json=TRACE)
        if path == "/rollouts/r1/sandbox/exec":
            stdout = "ok\n" if body["command"] == "echo ok" else "SCORE: 1.0\n"
            return httpx.Response(200, json={"exit_code": 0, "stdout": stdout, "stderr": "", "context": context})
        if path == "/rollouts/r1/sandbox/write":
            self.files[body["path"]] = body["content"]
            return httpx.Response(200, json={"path": body["path"], "exists": True, "context": context})
        if path == "/rollouts/r1/sandbox/exists":
            return httpx.Response(
                200, json={"path": body["path"], "exists": body["path"] in self.files, "context": context}
            )
        if path == "/rollouts/r1/sandbox/jobs":
            return httpx.Response(201, json={"job_id": "j1", "pid": 42, "running": True})
        if path == "/rollouts/r1/sandbox/jobs/j1/wait":
            return httpx.Response(200, json={"job_id": "j1", "pid": 42, "running": False, "exit_code": 0})
        if path == "/rollouts/r1" and request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(404, json={"detail": {"message": f"unexpected {request.method} {path}"}})

    def index(self, method: str, path: str) -> int:
        return next(i for i, (m, p, _) in enumerate(self.calls) if m == method and p == path)


def verifier(sandbox, task) -> VerifyResult:
    """TRL's recipe's shape: write a runner into the work dir, run it, read a score line."""
    sandbox.write_text("/home/user/workdir/_run_tests.py", "print('SCORE: 1.0')")
    result = sandbox.exec("cd /home/user/workdir && python3 _run_tests.py", timeout=30)
    score = next(float(line.split(":")[1]) for line in result.stdout.splitlines() if line.startswith("SCORE:"))
    return VerifyResult(env_reward=score, done=True)


def upstream_factory(service: FakeService, mode: str) -> OpenCodeSessionFactory:
    backend = RemoteSandboxBackend("http://opencode-env:8000")
    backend._client = OpenCodeEnvClient("http://opencode-env:8000", transport=httpx.MockTransport(service))
    config = OpenCodeConfig(base_url="http://inference:8000/v1", api_key="sk-upstream", model="policy")
    return OpenCodeSessionFactory(config=config, sandbox_backend=backend, mode=mode, verifier=verifier)


def run_session(mode: str) -> tuple[FakeService, list, VerifyResult]:
    service = FakeService()
    factory = upstream_factory(service, mode)
    session = factory.create(OpenCodeTask(instruction="reverse a line", upload_files={"/home/user/workdir/a.txt": "x"}))
    session.wait_for_completion()
    trace = session.fetch_proxy_trace()
    result = session.verify([])
    session.close()
    return service, trace, result


@pytest.mark.parametrize("mode", ["black_box", "transparent_proxy"])
def test_upstream_factory_runs_on_the_service_with_its_sandbox_api(mode: str) -> None:
    service, trace, result = run_session(mode)
    assert result.env_reward == 1.0
    (created,) = [body for method, path, body in service.calls if path == "/rollouts"]
    assert created["agent"] == "external" and created["sandbox_home"] == "/home/user"
    commands = [body["command"] for _, path, body in service.calls if path.endswith(("/exec", "/jobs"))]
    # The install probe passes, so neither the installer nor the proxy's pip install nor the proxy runs.
    assert not any("opencode.ai/install" in c or "pip install" in c or "interception.py" in c for c in commands)
    # Every opencode.json the sandbox gets calls the rollout's proxy port with the rollout's key.
    config = json.loads(service.files["/home/user/.config/opencode/opencode.json"])
    options = config["provider"]["intercepted"]["options"]
    assert options == {**options, "baseURL": SANDBOX_PROXY, "apiKey": "rollout-key"}
    # Commands before the agent's job are the harness's setup; the verifier's are not.
    execs = [(i, body["setup"]) for i, (_, path, body) in enumerate(service.calls) if path.endswith("/exec")]
    started = service.index("POST", "/rollouts/r1/sandbox/jobs")
    assert all(setup == (i < started) for i, setup in execs) and any(i > started for i, _ in execs)
    (agent,) = [body for _, path, body in service.calls if path.endswith("/jobs")]
    assert "opencode run" in agent["command"]
    assert agent["env"]["OPENAI_BASE_URL"] == SANDBOX_PROXY and agent["env"]["OPENAI_API_KEY"] == "rollout-key"
    assert "sk-upstream" not in json.dumps(service.calls)  # the upstream's key never reaches a sandbox
    # The agent phase ends (rollout finished: its processes killed) before the verifier's first operation.
    finished = service.index("POST", "/rollouts/r1/finish")
    assert finished > service.index("POST", "/rollouts/r1/sandbox/jobs/j1/wait")
    assert service.index("POST", "/rollouts/r1/sandbox/exec") < finished  # the readiness probe
    verifier_calls = [p for _, p, b in service.calls[finished:] if "_run_tests" in json.dumps(b)]
    assert len(verifier_calls) == 2
    assert service.calls[-1][0] == "DELETE"
    if mode == "transparent_proxy":
        assert trace == upstream_trace_records(TRACE, [TURN])
        assert trace[0]["completion_token_ids"] == [7, 8] and trace[0]["per_token_logps"] == [-0.25, -0.5]

        # Each record is also an OpenEnv trace entry: a TrainingTrace can be made from them as they are.
        def rows(training: TrainingTrace) -> list[tuple]:
            return [
                (t.node_id, t.prompt_token_ids, t.completion_token_ids, t.per_token_logps, t.loss_mask)
                for t in training.turns
            ]

        assert rows(TrainingTrace.from_entries(trace)) == rows(TrainingTrace.model_validate(TRACE))
        assert not any(p.endswith("/read") for _, p, _ in service.calls)  # never from a sandbox file
    else:
        assert trace == []


def test_proxy_command_parsing_and_a_mismatched_upstream() -> None:
    command = (
        "cd /home/user/proxy && python interception.py --upstream-url http://elsewhere:8000/v1 "
        "--trace /home/user/logs/agent/proxy_trace.jsonl --port 7123 --top-logprobs 5 > /home/user/p.log 2>&1"
    )
    proxy = parse_proxy_command(command)
    assert (proxy.port, proxy.trace_path, proxy.upstream_url) == (
        7123,
        "/home/user/logs/agent/proxy_trace.jsonl",
        "http://elsewhere:8000/v1",
    )
    assert parse_proxy_command("opencode run 'x'") is None
    service = FakeService()
    backend = RemoteSandboxBackend("http://opencode-env:8000")
    backend._client = OpenCodeEnvClient("http://opencode-env:8000", transport=httpx.MockTransport(service))
    sandbox = backend.create(timeout_s=60)
    with pytest.raises(ValueError, match="pass upstream_url= to RemoteSandboxBackend"):
        sandbox.start_bg(command)


def test_backend_pickles_without_its_connection() -> None:
    backend = RemoteSandboxBackend("http://opencode-env:8000", sampling={"temperature": 1.0})
    _ = backend.client
    copy = pickle.loads(pickle.dumps(backend))
    assert copy._client is None and copy.sampling == {"temperature": 1.0}


def test_wrapped_upstream_sessions_give_trl_the_service_training_trace() -> None:
    service = FakeService()
    factory = ServiceTracedSessionFactory(upstream_factory(service, "transparent_proxy"))
    session = factory.create("reverse a line")
    assert isinstance(session, TrainableSession)  # what TRL's loop-owning worker requires
    session.wait_for_completion()
    assert session.fetch_training_trace() == TrainingTrace.model_validate(TRACE)
    assert session.verify([]).env_reward == 1.0
    session.close()
    assert service.calls[-1][0] == "DELETE"


def test_a_service_session_verifier_runs_once_the_rollout_is_final() -> None:
    service = FakeService()
    client = OpenCodeEnvClient("http://opencode-env:8000", transport=httpx.MockTransport(service))
    created = CreatedRollout(rollout_id="r1", api_key="k", status="running", proxy_base_url="u", model="policy")
    task = Task(instruction="reverse a line")

    def score(sandbox, given_task) -> float:
        assert given_task is task
        return 0.5 if sandbox.exec("python3 check.py").stdout.startswith("SCORE") else 0.0

    session = OpenCodeServiceSession(client, created, 10, task, score)
    with pytest.raises(RuntimeError, match="still running"):
        session.verify([])  # never while the agent may still act
    service.final = True
    assert session.verify([]).env_reward == 0.5
    assert [b["setup"] for _, p, b in service.calls if p.endswith("/exec")] == [False]  # no setup command now
    assert ("POST", "/rollouts/r1/verify", {}) not in service.calls  # the service's tests are not run


def test_a_service_session_verifier_does_not_score_an_unscored_rollout() -> None:
    service = FakeService()
    service.final = True
    service.summary = lambda: RolloutSummary(  # type: ignore[method-assign]
        rollout_id="r1", status="setup_failed", final=True, created_at=0.0
    ).model_dump()
    client = OpenCodeEnvClient("http://opencode-env:8000", transport=httpx.MockTransport(service))
    created = CreatedRollout(rollout_id="r1", api_key="k", status="running", proxy_base_url="u", model="policy")
    session = OpenCodeServiceSession(client, created, 10, Task(instruction="x"), lambda sandbox, task: 1.0)
    with pytest.raises(RolloutNotScorable, match="setup_failed"):
        session.verify([])
