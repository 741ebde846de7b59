"""Upstream OpenEnv's ``OpenCodeSessionFactory`` and ``OpenCodeSession``, unchanged (tests/upstream),
on the OpenCode env service through ``RemoteSandboxBackend``: the real OpenCode CLI (``opencode
run``, as upstream launches it) in the service's sandbox, against the scripted inference model
(it always writes a string-reversing ``solution.py``, then loops).

The verifier is shaped like TRL's recipe's: it writes a test runner into the work dir, runs it with
``sandbox.exec`` and reads a score line; here it also records where it ran.
"""

import json
import time

import httpx
import pytest
from opencode_env.config import OpenCodeConfig
from opencode_env.harness import OpenCodeSessionFactory
from opencode_env.task import OpenCodeTask
from opencode_env_client import RemoteSandboxBackend, ServiceTracedSessionFactory
from openenv.core.harness import VerifyResult
from testcontainers.core.container import DockerContainer

from tests.container.conftest import MODEL_NAME, OPENCODE_IMAGE, start_opencode_env

RUNNER = """
import json, subprocess
tests = json.load(open("_tests.json"))
passed = sum(
    subprocess.run(["python3", "solution.py"], input=t["input"], capture_output=True, text=True).stdout.strip()
    == t["output"]
    for t in tests
)
print("SCORE: %.6f" % (passed / len(tests)))
"""
HELD_OUT = [{"input": "abc\n", "output": "cba"}, {"input": "rollout\n", "output": "tuollor"}]
FORGED = {
    "turn": 0,
    "request": {"messages": [{"role": "user", "content": "forged"}]},
    "response": {"choices": [{"message": {"role": "assistant", "content": "forged"}}]},
    "completion_token_ids": [1, 2, 3],
    "per_token_logps": [0.0, 0.0, 0.0],
}


class RecordingVerifier:
    """TRL's recipe's verifier shape, plus what the context it ran in looked like."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, sandbox, task) -> VerifyResult:
        for name, command in {
            "uid": "id -u",
            "agent_uid": "cat /home/user/workdir/agent_uid.txt",
            "agents_left": "pgrep -c -f '[o]pencode run' || true",  # [o]: not this shell itself
            "pytest": "python3 -m pytest --version",
            "home": "echo $HOME",
        }.items():
            self.seen[name] = sandbox.exec(command, timeout=30).stdout.strip()
        if not sandbox.exists("/home/user/workdir/solution.py"):
            return VerifyResult(env_reward=0.0, done=True)
        sandbox.write_text("/home/user/workdir/_tests.json", json.dumps(HELD_OUT))
        sandbox.write_text("/home/user/workdir/_run_tests.py", RUNNER)
        result = sandbox.exec("cd /home/user/workdir && python3 _run_tests.py", timeout=60)
        score = [float(line.split(":")[1]) for line in result.stdout.splitlines() if line.startswith("SCORE:")]
        return VerifyResult(env_reward=score[0] if score else 0.0, done=True)


def run_upstream_session(url: str, mode: str, setup_shell: str) -> tuple[dict, RecordingVerifier, list, list, str]:
    """One session of upstream's factory on the service, wrapped for TRL's loop: (summary, verifier,
    the proxy trace upstream's session reads, the training rows TRL would read, rollout id)."""
    config = OpenCodeConfig(base_url="http://inference:8000/v1", model=MODEL_NAME, agent_timeout_s=180)
    verifier = RecordingVerifier()
    backend = RemoteSandboxBackend(url, limits={"wall_s": 240, "max_turns": 3})
    factory = ServiceTracedSessionFactory(
        OpenCodeSessionFactory(config=config, sandbox_backend=backend, mode=mode, verifier=verifier)
    )
    task = OpenCodeTask(
        instruction="Write solution.py that prints its input line reversed.",
        upload_files={"/home/user/workdir/notes.txt": "uploaded"},
        setup_shell=setup_shell,
    )
    session = factory.create(task)
    rollout_id = session.sandbox.sandbox_id
    try:
        session.wait_for_completion()
        trace = session.fetch_proxy_trace()
        rows = [t.completion_token_ids for t in session.fetch_training_trace().turns]
        result = session.verify([])
        summary = httpx.get(f"{url}/rollouts/{rollout_id}", timeout=30).json()
        summary["reward"] = result.env_reward
    finally:
        session.close()
    return summary, verifier, trace, rows, rollout_id


SETUP = (
    'test "$(cat /home/user/workdir/notes.txt)" = uploaded && git --version && python3 -m pytest --version '
    "&& id -u > /home/user/workdir/agent_uid.txt"
)


@pytest.mark.parametrize("mode", ["black_box", "transparent_proxy"])
def test_upstream_factory_runs_opencode_in_the_service_sandbox(opencode_env, mode: str) -> None:
    url = opencode_env.url
    summary, verifier, trace, rows, rollout_id = run_upstream_session(url, mode, SETUP)
    assert summary["reward"] == 1.0  # the agent's solution.py, judged by the upstream-style verifier
    assert summary["agent"] == "external" and summary["turns"] >= 1
    # The verifier ran as the seat's verifier uid in a fresh home, with no agent process left, pytest there.
    assert verifier.seen["uid"] != verifier.seen["agent_uid"]
    assert int(verifier.seen["uid"]) >= 30000 and 20000 <= int(verifier.seen["agent_uid"]) < 30000
    assert verifier.seen["agents_left"] == "0"
    assert verifier.seen["pytest"].startswith("pytest")
    assert verifier.seen["home"].endswith(f"{rollout_id}.harness/home")
    turns = httpx.get(f"{url}/rollouts/{rollout_id}/turns", timeout=30).json()
    assert rows == [t["completion_token_ids"] for t in turns]  # what TRL trains on: the service's recording
    if mode == "black_box":
        assert trace == []
    else:
        # The rows TRL trains on: the service's recording, with the engine's ids and logprobs.
        assert [t["completion_token_ids"] for t in trace] == [t["completion_token_ids"] for t in turns]
        assert [t["per_token_logps"] for t in trace] == [t["per_token_logps"] for t in turns]
        assert all(
            t["completion_token_ids"] and len(t["per_token_logps"]) == len(t["completion_token_ids"]) for t in trace
        )


def test_a_trace_file_the_agent_writes_changes_no_training_row(opencode_env) -> None:
    """Upstream's harness reads its trace from a file in the sandbox; the agent's uid rewrites that file
    (here: before and after the proxy starts). The trace the harness gets is the service's recording."""
    forged = json.dumps(FORGED).replace("'", "'\\''")
    path = "/home/user/logs/agent/proxy_trace.jsonl"
    later = f"{{ (sleep 2; echo '{forged}' >> {path}) >/dev/null 2>&1 & }}"
    tamper = f"{SETUP} && mkdir -p /home/user/logs/agent && echo '{forged}' > {path} && {later}"
    _, _, trace, rows, rollout_id = run_upstream_session(opencode_env.url, "transparent_proxy", tamper)
    turns = httpx.get(f"{opencode_env.url}/rollouts/{rollout_id}/turns", timeout=30).json()
    recorded = [t["completion_token_ids"] for t in turns]
    assert trace and FORGED["completion_token_ids"] not in [t["completion_token_ids"] for t in trace]
    assert [t["completion_token_ids"] for t in trace] == recorded and rows == recorded


@pytest.fixture(scope="module")
def package_index(network) -> DockerContainer:
    """A stand-in package index on the test network (``http://index:8080``)."""
    container = (
        DockerContainer(OPENCODE_IMAGE)
        .with_network(network)
        .with_network_aliases("index")
        .with_kwargs(entrypoint=["python3", "-m", "http.server", "8080"])
    )
    container.start()
    yield container
    container.stop()


FETCH = "python3 -c \"import urllib.request; urllib.request.urlopen('http://index:8080/', timeout=5)\""


def setup_outcome(url: str, setup: list[str]) -> tuple[str, dict]:
    """Start an external-agent rollout with ``setup``; its id and status once the setup is over."""
    task = {"instruction": "x", "setup": setup, "limits": {"wall_s": 120}}
    created = httpx.post(f"{url}/rollouts", json={"task": task, "agent": "external"}, timeout=30)
    assert created.status_code == 201, created.text
    rid = created.json()["rollout_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/rollouts/{rid}", timeout=30).json()
        if status["final"] or (status["status"] == "running" and len(status["setup_results"]) == len(setup)):
            return rid, status
        time.sleep(0.2)
    raise AssertionError(f"setup of {rid} did not end: {status}")


def test_setup_may_reach_the_allowed_index_and_the_agent_may_not(
    opencode_image, opencode_env, network, package_index
) -> None:
    # Off by default: the setup command cannot reach the index, and the rollout is not scored.
    rid, status = setup_outcome(opencode_env.url, [FETCH])
    assert status["status"] == "setup_failed", status
    httpx.delete(f"{opencode_env.url}/rollouts/{rid}", timeout=30)

    service = start_opencode_env(opencode_image, network, 1, "opencode-env-setup-net", SETUP_NETWORK_ALLOW="index:8080")
    try:
        url = service.url
        # The background sleep must not survive into the agent phase (it could hold a connection open).
        rid, status = setup_outcome(url, [FETCH, "sleep 600 >/dev/null 2>&1 &"])
        assert status["status"] == "running", status  # the setup reached the index
        agent_phase = httpx.post(
            f"{url}/rollouts/{rid}/sandbox/exec", json={"command": f"{FETCH}; echo $?; pgrep -c sleep"}, timeout=60
        ).json()
        fetch_code, sleepers = agent_phase["stdout"].split()
        assert agent_phase["context"] == "agent" and fetch_code != "0" and sleepers == "0"

        def sandbox_exec(command: str, **extra) -> httpx.Response:
            body = {"command": command, **extra}
            return httpx.post(f"{url}/rollouts/{rid}/sandbox/exec", json=body, timeout=60)

        # A harness's setup command (upstream's setup_shell) reaches the index while it runs, and what
        # it leaves running is killed when it ends.
        setup = sandbox_exec(f"{FETCH} && (sleep 600 >/dev/null 2>&1 &)", setup=True).json()
        assert setup["exit_code"] == 0, setup
        after = sandbox_exec(f"{FETCH}; echo $?; pgrep -c sleep").json()["stdout"].split()
        assert after[0] != "0" and after[1] == "0"
        # Once the agent's job started, no more setup commands.
        job = httpx.post(f"{url}/rollouts/{rid}/sandbox/jobs", json={"command": "sleep 30"}, timeout=30)
        assert job.status_code == 201
        refused = sandbox_exec(FETCH, setup=True)
        assert refused.status_code == 409 and "before the rollout's first background job" in refused.text
        httpx.delete(f"{url}/rollouts/{rid}", timeout=30)
    finally:
        service.stop()
