"""The OpenCode environment image with the real OpenCode CLI against the real inference service.

The inference server runs the scripted fixture model, which always calls
``bash: echo 'print(input()[::-1])' > solution.py`` (a string-reversing solution) and loops forever.
"""

import json
import subprocess
import time

import httpx
import pytest
from testcontainers.core.container import DockerContainer

from tests.container.conftest import MODEL_NAME, SCRIPTED_CALL, start_opencode_env, wait_healthy

REVERSE_TESTS = [{"stdin": "abc\n", "expected_stdout": "cba"}, {"stdin": "rollout\n", "expected_stdout": "tuollor"}]


def create(url: str, task: dict, **extra) -> dict:
    response = httpx.post(f"{url}/rollouts", json={"task": task, **extra}, timeout=30)
    assert response.status_code == 201, response.text
    return response.json()


def wait(url: str, rollout_id: str, timeout_s: float = 240) -> dict:
    return httpx.post(
        f"{url}/rollouts/{rollout_id}/wait", params={"timeout_s": timeout_s}, timeout=timeout_s + 30
    ).json()


def assert_engine_exact(inference_url: str, turn: dict, call: dict) -> None:
    """The turn's prompt ids are the engine's own tokenisation of the recorded request, its completion
    decodes to the scripted tool call with one logprob per token, and it is trainable."""
    tokenized = httpx.post(
        f"{inference_url}/tokenize",
        timeout=120,
        json={
            "model": MODEL_NAME,
            "messages": turn["request"]["messages"],
            "tools": turn["request"].get("tools"),
            "add_generation_prompt": True,
        },
    ).json()
    assert turn["prompt_token_ids"] == tokenized["tokens"]
    text = httpx.post(
        f"{inference_url}/detokenize", timeout=30, json={"model": MODEL_NAME, "tokens": turn["completion_token_ids"]}
    ).json()["prompt"]
    assert text.startswith("<tool_call>") and json.dumps(call) in text
    assert len(turn["per_token_logps"]) == len(turn["completion_token_ids"]) > 0
    assert turn["finish_reason"] == "tool_calls" and turn["trainable"] is True


def task(**overrides) -> dict:
    base = {
        "task_id": "reverse",
        "instruction": "Write solution.py that prints its input line reversed.",
        "tests": REVERSE_TESTS,
        "limits": {"max_turns": 2, "wall_s": 240},
    }
    return {**base, **overrides}


def in_container(container: DockerContainer, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "exec", container.get_wrapped_container().id, *command], capture_output=True, text=True
    )


def test_rollout_runs_the_agent_tool_call_in_the_sandbox_and_records_engine_tokens(
    opencode_env, scripted_inference
) -> None:
    url = opencode_env.url
    rollout = create(url, task())
    status = wait(url, rollout["rollout_id"])
    try:
        assert status["status"] == "stopped"
        assert "turn limit" in status["detail"]  # the scripted agent loops
        files = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/files").json()
        assert files["solution.py"].strip() == "print(input()[::-1])"  # the tool call ran in the work dir

        turns = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/turns").json()
        assert len(turns) == 2
        assert all(t["upstream_status"] == 200 and t["stream"] for t in turns)
        for t in turns:
            assert_engine_exact(scripted_inference.url, t, SCRIPTED_CALL)
        assert turns[1]["prefix_consistent"] is not None

        trace = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/trace").json()
        assert trace["schema_version"] == 1
        assert len(trace["turns"]) == 2
        row = trace["turns"][0]
        assert row["loss_mask"] == [0] * len(row["prompt_token_ids"]) + [1] * len(row["completion_token_ids"])

        verdict = httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/verify", timeout=60).json()
        assert verdict["reward"] == 1.0
        assert verdict["passed"] == 2
    finally:
        httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}")


def test_a_prestarted_warm_agent_serves_the_next_rollout_with_its_limits(
    opencode_image, scripted_inference, network
) -> None:
    # One rollout slot and (default AGENT_SPARES=1) two sandbox seats, both warmed with the default limits.
    container = start_opencode_env(opencode_image, network, 1)
    try:
        url, limits = container.url, {"max_turns": 2, "wall_s": 240}
        wait_healthy(f"{url}/health", timeout_s=120, until=lambda health: health["warm_agents"] == 2)
        # No seat was prepared with these limits, so this rollout starts its server afresh...
        first = create(url, task(limits=limits))
        busy = httpx.post(f"{url}/rollouts", json={"task": task()})
        assert busy.status_code == 503  # the spare seat is no extra capacity
        assert wait(url, first["rollout_id"])["agent_prestarted"] is False
        httpx.delete(f"{url}/rollouts/{first['rollout_id']}")
        # ...and closing it prepares its seat's next server with its limits.
        wait_healthy(f"{url}/health", timeout_s=120, until=lambda health: health["warm_agents"] == 2)
        rollout = create(url, task(limits=limits))
        assert httpx.get(f"{url}/health").json()["warm_agents"] == 1  # the other seat's server stays ready
        status = wait(url, rollout["rollout_id"])
        assert status["agent_prestarted"] is True, status
        assert status["status"] == "stopped", status
        files = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/files").json()
        assert files["solution.py"].strip() == "print(input()[::-1])"
        # The warm-up session's call was answered by the proxy and is not one of the rollout's turns.
        turns = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/turns").json()
        assert [t["turn"] for t in turns] == [0, 1]
        assert all(t["upstream_status"] == 200 for t in turns)
        assert "prints its input line reversed" in json.dumps(turns[0]["request"]["messages"])
        assert "Reply with: ok" not in json.dumps([t["request"]["messages"] for t in turns])
    finally:
        container.stop()


def test_verification_scores_an_incorrect_solution_below_one(opencode_env) -> None:
    url = opencode_env.url
    tests = [{"stdin": "abc\n", "expected_stdout": "ABC"}, {"stdin": "aba\n", "expected_stdout": "aba"}]
    rollout = create(url, task(tests=tests, verify_commands=["test -f solution.py", "grep -q upper solution.py"]))
    wait(url, rollout["rollout_id"])
    verdict = httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/verify", timeout=60).json()
    assert [r["passed"] for r in verdict["results"]] == [False, True, True, False]
    assert verdict["reward"] == 0.5
    httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}")


def sandbox_uid(container: DockerContainer, rollout_id: str) -> str:
    return in_container(container, "stat", "-c", "%u", f"/sandboxes/{rollout_id}/work").stdout.strip()


def pids_of(container: DockerContainer, uid: str) -> set[str]:
    return set(in_container(container, "ps", "-o", "pid=", "-u", uid).stdout.split())


def test_turn_cap_stops_a_looping_agent_and_leaves_no_process(opencode_env) -> None:
    url = opencode_env.url
    rollout = create(url, task(limits={"max_turns": 4, "wall_s": 240}))
    try:
        status = wait(url, rollout["rollout_id"])
        assert status["status"] == "stopped", status
        assert status["turns"] == 4, status
        uid = sandbox_uid(opencode_env, rollout["rollout_id"])
        deadline = time.monotonic() + 3  # a killed process may still be a zombie for a moment
        while pids_of(opencode_env, uid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = in_container(opencode_env, "ps", "-o", "pid,ppid,stat,etime,args", "-u", uid).stdout
        assert pids_of(opencode_env, uid) == set(), left
    finally:
        httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}")


def test_killing_a_running_rollout_leaves_no_process_behind(opencode_env) -> None:
    url = opencode_env.url
    rollout = create(
        url, task(setup=["sleep 300 & sleep 300 & (setsid sleep 300 &) ; sleep 300"], limits={"wall_s": 600})
    )
    deadline = time.monotonic() + 30
    while "sleep" not in in_container(opencode_env, "ps", "-eo", "uid,comm").stdout and time.monotonic() < deadline:
        time.sleep(0.2)
    uid = sandbox_uid(opencode_env, rollout["rollout_id"])
    before = pids_of(opencode_env, uid)
    assert len(before) >= 4
    assert httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}").status_code == 204
    # The slot's next OpenCode server may already be starting as the same uid: only new pids are allowed.
    assert before & pids_of(opencode_env, uid) == set()


def test_concurrent_rollouts_cannot_see_each_other(opencode_env) -> None:
    url = opencode_env.url
    a = create(url, task(setup=["echo secret-a > mine.txt"]), agent="external")
    b = create(url, task(), agent="external")
    try:
        time.sleep(1)
        uids = {r["rollout_id"]: sandbox_uid(opencode_env, r["rollout_id"]) for r in (a, b)}
        assert uids[a["rollout_id"]] != uids[b["rollout_id"]]
        peek = in_container(
            opencode_env,
            "setpriv",
            f"--reuid={uids[b['rollout_id']]}",
            f"--regid={uids[b['rollout_id']]}",
            "--clear-groups",
            "cat",
            f"/sandboxes/{a['rollout_id']}/work/mine.txt",
        )
        assert peek.returncode != 0
        assert "Permission denied" in peek.stderr
        kill = in_container(
            opencode_env,
            "setpriv",
            f"--reuid={uids[b['rollout_id']]}",
            f"--regid={uids[b['rollout_id']]}",
            "--clear-groups",
            "kill",
            "-0",
            "1",
        )
        assert kill.returncode != 0
    finally:
        for r in (a, b):
            httpx.delete(f"{url}/rollouts/{r['rollout_id']}")


PORT_PROBE = (
    "import socket,sys\n"
    "def ok(h,p):\n"
    "    try:\n        socket.create_connection((h,p),timeout=3).close(); return True\n"
    "    except OSError: return False\n"
)


def test_network_reaches_only_the_seats_own_proxy_port(opencode_env) -> None:
    # Each free seat (3 slots + 1 spare) runs its next OpenCode server on 127.0.0.1:41000+seat and
    # reaches the proxy on 127.0.0.1:24000+seat.
    wait_healthy(f"{opencode_env.url}/health", timeout_s=120, until=lambda health: health["warm_agents"] >= 1)
    agent_ports, proxy_ports = [41000, 41001, 41002, 41003], [24000, 24001, 24002, 24003]
    as_root = in_container(
        opencode_env, "python3", "-c", PORT_PROBE + f"print([ok('127.0.0.1',p) for p in {agent_ports}])"
    )
    assert "True" in as_root.stdout, as_root  # the service reaches the warm servers...
    probe = PORT_PROBE + (
        "print(ok('127.0.0.1',8000), ok('inference',8000), ok('172.17.0.1',80), ok('1.1.1.1',443),"
        f" any(ok('127.0.0.1',p) for p in {agent_ports}), [ok('127.0.0.1',p) for p in {proxy_ports}])"
    )
    run = in_container(
        opencode_env, "setpriv", "--reuid=20001", "--regid=20001", "--clear-groups", "python3", "-c", probe
    )
    # ...a sandbox none of them, nor the API: only its own seat's proxy port
    assert run.stdout.strip().split(maxsplit=5) == ["False"] * 5 + ["[False, True, False, False]"], run.stderr


@pytest.mark.parametrize(
    ("setup", "limits", "expect_status", "evidence"),
    [
        (
            ["python3 -c 'x = b\"x\" * (400 << 20); import time; time.sleep(60)'"],
            {"memory_mb": 128},
            "limit_exceeded",
            "memory limit",
        ),
        (["head -c 100M /dev/zero > big.bin && echo written"], {"disk_mb": 16}, "setup_failed", "File size limit"),
        (
            ['python3 -c \'import subprocess; [subprocess.Popen(["sleep", "30"]) for _ in range(64)]\''],
            {"max_processes": 16},
            "setup_failed",
            "Resource temporarily unavailable",
        ),
        (["python3 -c 'while True: pass'"], {"cpu_s": 2}, "setup_failed", ""),
        (["sleep 60"], {"wall_s": 3}, "timed_out", "wall-clock"),
    ],
)
def test_resource_limits_hold(opencode_env, setup, limits, expect_status, evidence) -> None:
    url = opencode_env.url
    rollout = create(url, task(setup=setup, limits=limits))
    status = wait(url, rollout["rollout_id"], timeout_s=120)
    httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}")
    assert status["status"] == expect_status, status
    text = (status["detail"] or "") + "".join(r["stderr"] for r in status["setup_results"])
    assert evidence in text, text
    if limits.get("cpu_s"):
        assert status["setup_results"][0]["exit_code"] in (128 + 24, -24)  # SIGXCPU


def test_upstream_down_is_an_infrastructure_failure_not_a_zero(opencode_env) -> None:
    url = opencode_env.url
    rollout = create(url, task(), upstream_url="http://127.0.0.1:9", model="x")
    status = wait(url, rollout["rollout_id"])
    verdict = httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/verify", timeout=60).json()
    httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}")
    assert status["status"] == "infra_failure"
    assert status["infra_failure"] is True
    assert verdict["reward"] is None


def test_traces_survive_a_restart(opencode_env) -> None:
    url = opencode_env.url
    rollout = create(url, task())
    wait(url, rollout["rollout_id"])
    before = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/trace").json()
    opencode_env.get_wrapped_container().restart()
    # a restart publishes the port anew
    url = opencode_env.url = f"http://{opencode_env.get_container_host_ip()}:{opencode_env.get_exposed_port(8000)}"
    wait_healthy(f"{url}/health", timeout_s=60)
    after = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/trace").json()
    assert after == before
    assert len(after["turns"]) == 2
    assert httpx.get(f"{url}/rollouts/{rollout['rollout_id']}").json()["status"] == "stopped"


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("POST", "/rollouts", {"json": {"task": {"instruction": ""}}}, 422),
        ("POST", "/rollouts", {"json": {"task": {"instruction": "x", "files": {"../escape": "x"}}}}, 422),
        ("POST", "/rollouts", {"json": {"task": {"instruction": "x", "limits": {"max_turns": 0}}}}, 422),
        ("POST", "/rollouts", {"content": "{nope", "headers": {"content-type": "application/json"}}, 422),
        ("GET", "/rollouts/nope", {}, 404),
        ("POST", "/rollouts/nope/verify", {}, 404),
        ("POST", "/v1/chat/completions", {"json": {"messages": []}}, 401),
        ("POST", "/v1/chat/completions", {"json": {"messages": []}, "headers": {"authorization": "Bearer wrong"}}, 401),
    ],
)
def test_malformed_requests_get_4xx(opencode_env, method, path, kwargs, status) -> None:
    response = httpx.request(method, f"{opencode_env.url}{path}", timeout=30, **kwargs)
    assert response.status_code == status, response.text


def test_proxy_rejects_bad_bodies_for_a_valid_key_and_capacity_is_reported(opencode_env) -> None:
    url = opencode_env.url
    rollouts = [create(url, task(), agent="external") for _ in range(3)]
    try:
        headers = {"authorization": f"Bearer {rollouts[0]['api_key']}", "content-type": "application/json"}
        assert httpx.post(f"{url}/v1/chat/completions", content="{bad", headers=headers).status_code == 400
        assert httpx.post(f"{url}/v1/chat/completions", json={"model": "x"}, headers=headers).status_code == 400
        full = httpx.post(f"{url}/rollouts", json={"task": task()})
        assert full.status_code == 503
        assert full.json()["detail"]["max_rollouts"] == 3
    finally:
        for r in rollouts:
            httpx.delete(f"{url}/rollouts/{r['rollout_id']}")
