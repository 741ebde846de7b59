"""Reward-integrity attacks on the OpenCode env, run as a sandbox uid the way a policy under RL would:
steering verification from what the agent leaves behind, leaking held-out checks to a running
rollout, a process that outlives its rollout, trees deeper than a recursive walk, sampling fields
sent by sandbox code, and bad names and input. Each test fails on the code before these defences.
See services/opencode_env/README.md "Threat model".
"""

import json
import socket
import time

import httpx
import pytest

from tests.container.conftest import program, start_opencode_env, wait_healthy
from tests.container.test_opencode_attacks import close, run_attack
from tests.container.test_opencode_env import create, in_container, sandbox_uid, task, wait

# Planted by the agent (its setup command, as its uid): a .pth in its user site-packages that makes
# every Python exit 0, shell start-up files, a sitecustomize in the work dir, a git alias in ~/.gitconfig.
PLANT = program("plant")


def test_checks_run_in_a_context_the_agent_could_not_prepare(opencode_env) -> None:
    url = opencode_env.url
    checks = [
        "python3 -c 'import sys; sys.exit(3)'",
        "python3 -c 'assert 1 == 2'",
        "git nope",
        "test ! -e ~/.bashrc",
        "test -f sitecustomize.py && test ! -e planted.txt",
    ]
    rollout, out = run_attack(url, PLANT, verify_commands=checks)
    try:
        assert "planted" in out, out
        httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/finish", timeout=30)
        verdict = httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/verify", timeout=120).json()
        passed = [r["passed"] for r in verdict["results"]]
        # Only the last two pass: a fresh HOME, and the work dir's files (and only those) reached the checks.
        assert passed == [False, False, False, True, True], verdict
    finally:
        close(url, rollout)


# A rollout still running (the group member that would profit): listens on an abstract Unix socket
# and reads every process's environment and command line for the held-out marker.
RECEIVER = program("receiver")

# Planted by the rollout being verified: run by its check, it tries to pass the check on.
SENDER = program("sender")


def test_held_out_checks_reach_no_running_rollout(opencode_env) -> None:
    url = opencode_env.url
    receiver, out = run_attack(url, RECEIVER)
    assert "listening" in out, out
    leaker = create(
        url,
        task(files={"sender.py": SENDER}, tests=[], verify_commands=["python3 sender.py  # HELD-OUT-4411"]),
        agent="external",
    )
    try:
        deadline = time.monotonic() + 60  # its files are placed
        while httpx.get(f"{url}/rollouts/{leaker['rollout_id']}").json()["status"] == "pending":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        httpx.post(f"{url}/rollouts/{leaker['rollout_id']}/finish", timeout=30)
        verdict = httpx.post(f"{url}/rollouts/{leaker['rollout_id']}/verify", timeout=120).json()
        assert "blocked" in verdict["results"][0]["stdout"], verdict
        time.sleep(0.5)
        seen = httpx.get(f"{url}/rollouts/{receiver['rollout_id']}/files", timeout=30).json()["seen.txt"]
        assert "HELD-OUT" not in seen, seen
        assert httpx.get(f"{url}/rollouts/{receiver['rollout_id']}").json()["status"] == "running"
    finally:
        close(url, leaker, receiver)


# The thread-group leader exits with the raw exit syscall (x86-64: 60) while a thread keeps 300 MB and
# keeps writing into whatever work dir this uid gets next.
ZOMBIE_LEADER = program("zombie_leader")


def test_nothing_outlives_its_rollout_and_hidden_memory_is_counted(opencode_env) -> None:
    url = opencode_env.url
    rollout, out = run_attack(url, ZOMBIE_LEADER, limits={"wall_s": 240, "memory_mb": 128})
    uid = sandbox_uid(opencode_env, rollout["rollout_id"])
    status = wait(url, rollout["rollout_id"], timeout_s=60)
    close(url, rollout)
    assert "haunting" in out, out  # the setup command ended: the hider had left its process group
    assert status["status"] == "limit_exceeded", status
    assert "memory limit" in status["detail"], status
    threads = in_container(opencode_env, "sh", "-c", f"grep -l '^Uid:\\s*{uid}\\s' /proc/[0-9]*/task/*/status")
    assert threads.stdout.strip() == "", threads.stdout


DEEP_TREE = program("deep_tree")


def test_a_tree_too_deep_for_recursion_breaks_no_walk_and_no_restart(
    opencode_image, scripted_inference, network
) -> None:
    container = start_opencode_env(opencode_image, network, 1)
    url = container.url
    hog = (
        "import time\nhog = bytearray(400 << 20)\nfor i in range(0, len(hog), 4096):\n    hog[i] = 1\ntime.sleep(30)\n"
    )
    try:
        rollout, _ = run_attack(url, DEEP_TREE + hog, limits={"wall_s": 240, "memory_mb": 128})
        status = wait(url, rollout["rollout_id"], timeout_s=60)
        assert status["status"] == "limit_exceeded", status  # the watchdog kept enforcing limits
        files = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/files", timeout=30)
        assert files.status_code == 200, files.text
        assert httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}", timeout=120).status_code == 204
        left, _ = run_attack(url, DEEP_TREE)  # a seat came back; this tree is left for the restart
        assert wait(url, left["rollout_id"], timeout_s=60)["status"] == "limit_exceeded"
        # The watchdog stopped it a few hundred levels down; a faster writer gets further before the
        # next check: make it 3000 levels more, past Python's recursion limit, as the restart's leftover.
        deeper = in_container(
            container,
            "python3",
            "-c",
            f"import os\nos.chdir('/sandboxes/{left['rollout_id']}/work')\n"
            "for _ in range(3000):\n    os.mkdir('e')\n    os.chdir('e')\n",
        )
        assert deeper.returncode == 0, deeper.stderr
        container.get_wrapped_container().restart(timeout=20)
        url = container.url = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8000)}"
        wait_healthy(f"{url}/health", timeout_s=90)
        assert (
            left["rollout_id"] not in in_container(container, "ls", "/sandboxes").stdout.split()
        )  # the start-up cleanup
        close(url, create(url, task(), agent="external"))  # and serves again
    finally:
        container.stop()


def test_sandbox_code_cannot_change_how_the_engine_samples(opencode_env) -> None:
    url = opencode_env.url
    rollout = create(url, task(), agent="external", sampling={"temperature": 0.7})
    headers = {"authorization": f"Bearer {rollout['api_key']}"}
    try:
        for field in (
            {"allowed_token_ids": [1]},
            {"structured_outputs": {"choice": ["a"]}},
            {"min_tokens": 9},
            {"ignore_eos": True},
            {"logit_bias": {"1": 100}},
            {"tool_choice": "required"},
        ):
            answer = httpx.post(
                f"{url}/v1/chat/completions",
                headers=headers,
                timeout=30,
                json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **field},
            )
            assert answer.status_code == 400, (field, answer.text)
        relayed = httpx.post(
            f"{url}/v1/chat/completions",
            headers=headers,
            timeout=120,
            json={
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "temperature": 0.0,
                "seed": 5,
                "top_p": 0.01,
            },
        )
        assert relayed.status_code == 200, relayed.text
        [turn] = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/turns", timeout=30).json()
        sent = turn["request"]
        assert sent["temperature"] == 0.7, sent
        assert "seed" not in sent, sent
        assert "top_p" not in sent, sent
    finally:
        close(url, rollout)


DIALECT_CALLS = {
    # path: (the smallest call, fields that would steer sampling, the agent's own sampling fields)
    "/v1/messages": (
        {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        [
            {"tool_choice": {"type": "any"}},
            {"tool_choice": {"type": "tool", "name": "Bash"}},
            {"output_config": {"format": {"type": "json_schema", "schema": {}}}},
            {"allowed_token_ids": [1]},
        ],
        {"temperature": 0.0, "top_k": 1, "thinking": {"type": "enabled", "budget_tokens": 1024}},
    ),
    "/v1/responses": (
        {"model": "m", "max_output_tokens": 4, "input": "hi"},
        [
            {"tool_choice": "required"},
            {"text": {"format": {"type": "json_object"}}},
            {"logit_bias": {"1": 100}},
            {"previous_response_id": "resp_1"},
        ],
        {"temperature": 0.0, "top_p": 0.01, "reasoning": {"effort": "high"}},
    ),
}


@pytest.mark.parametrize("path", sorted(DIALECT_CALLS))
def test_no_agent_dialect_is_a_way_around_the_sampling_rules(opencode_env, path: str) -> None:
    url = opencode_env.url
    call, steering, own_sampling = DIALECT_CALLS[path]
    rollout = create(url, task(), agent="external", sampling={"temperature": 0.7})
    headers = {"x-api-key": rollout["api_key"], "authorization": f"Bearer {rollout['api_key']}"}
    try:
        for field in steering:
            answer = httpx.post(f"{url}{path}", headers=headers, timeout=30, json={**call, **field})
            assert answer.status_code == 400, (field, answer.text)
        relayed = httpx.post(f"{url}{path}", headers=headers, timeout=120, json={**call, **own_sampling})
        assert relayed.status_code == 200, relayed.text
        [turn] = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/turns", timeout=30).json()
        sent = turn["request"]
        assert sent["temperature"] == 0.7 and sent["max_tokens"] == 4, sent
        assert not {"top_k", "top_p", "thinking", "reasoning", "seed"} & set(sent), sent
        assert len(turn["per_token_logps"]) == len(turn["completion_token_ids"]) > 0
    finally:
        close(url, rollout)


def test_bad_names_and_bad_input_get_clear_answers(opencode_env) -> None:
    url = opencode_env.url
    for name in ("a\u0000b", "d/", ".", "./a", "a//b"):
        answer = httpx.post(f"{url}/rollouts", json={"task": task(files={name: "x"})}, timeout=30)
        assert answer.status_code == 422, (name, answer.text)
        assert "file path" in answer.text, (name, answer.text)
    rollout, out = run_attack(url, "open(b'bad\\xff.txt', 'w').write('x')\nprint('named')\n")
    try:
        assert "named" in out, out
        files = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/files", timeout=30)
        assert files.status_code == 200, files.text
        assert files.json()["bad\\xff.txt"] == "x", files.text
    finally:
        close(url, rollout)
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:  # a body over API_MAX_BODY_BYTES
        sock.sendall(
            b"POST /rollouts HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n{" % (64 << 20)
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 413"), "no 413"
    with socket.create_connection((host, int(port)), timeout=60) as sock:  # headers that never end
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        began = time.monotonic()
        assert sock.recv(4096) == b""  # closed by the service
        assert time.monotonic() - began < 30
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"


@pytest.mark.parametrize("path", ["/rollouts/x/wait?timeout_s=nan", "/rollouts/x/wait?timeout_s=-1"])
def test_no_input_answers_500(opencode_env, path) -> None:
    answer = httpx.post(f"{opencode_env.url}{path}", timeout=30)
    assert answer.status_code in (404, 422), answer.text
    json.loads(answer.text)
