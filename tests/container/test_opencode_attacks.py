"""Attacks on the OpenCode env from inside a sandbox, and hostile input from outside.

Each attack runs as a sandbox uid, the way a policy under training would: as a rollout's setup
command (which runs as the rollout's uid in its sandbox, as the agent's tool calls do), with the
attack script placed as a task file. Each test asserts that the attack fails and that the service
keeps serving. See services/opencode_env/README.md "Threat model".
"""

import concurrent.futures
import json
import socket
import threading
import time

import httpx
import pytest

from tests.container.conftest import program, start_opencode_env, wait_healthy
from tests.container.test_opencode_env import create, in_container, sandbox_uid, task, wait

PROXY_PORT_BASE, AGENT_PORT_BASE, UID_BASE = 24000, 41000, 20000


def run_attack(
    url: str, script: str, limits: dict | None = None, verify_commands: list[str] | None = None, **extra
) -> tuple[dict, str]:
    """Run ``script`` (Python) as a setup command of a rollout with no agent (held-out checks:
    ``verify_commands`` instead of the stdin tests); (rollout, its stdout)."""
    checks = {} if verify_commands is None else {"tests": [], "verify_commands": verify_commands}
    rollout = create(
        url,
        task(
            files={"attack.py": script, **extra.pop("files", {})},
            setup=["python3 attack.py"],
            limits=limits or {"wall_s": 240},
            **checks,
        ),
        agent="external",
        **extra,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}", timeout=30).json()
        if status["setup_results"] or status["status"] not in ("pending", "running"):
            break
        time.sleep(0.25)
    results = status["setup_results"]
    return rollout, results[0]["stdout"] + results[0]["stderr"] if results else ""


def close(url: str, *rollouts: dict) -> None:
    for rollout in rollouts:
        httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}", timeout=60)


PROBE = f"""
import json, os, socket, urllib.error, urllib.request
own = {PROXY_PORT_BASE} + os.getuid() - {UID_BASE}
def call(url, key=None, body=None, method="GET"):
    headers = {{"authorization": "Bearer " + key, "content-type": "application/json"}} if key else {{}}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=3).status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return "unreachable"
chat = json.dumps({{"messages": [{{"role": "user", "content": "hi"}}]}}).encode()
messages = json.dumps({{"model": "m", "max_tokens": 8, "messages": [{{"role": "user", "content": "hi"}}]}}).encode()
stolen = open("stolen_key.txt").read().strip()
victim = open("victim_id.txt").read().strip()
own_ip = socket.gethostbyname(socket.gethostname())
def target(fd):
    try:
        return os.readlink(f"/proc/self/fd/{{fd}}")
    except OSError:  # the descriptor listdir itself used
        return None
print(json.dumps({{
    "inherited": [t for t in map(target, sorted(os.listdir("/proc/self/fd"), key=int)[3:]) if t],  # beyond stdio
    "api": call("http://127.0.0.1:8000/health"),
    "api_rollouts": call("http://127.0.0.1:8000/rollouts"),
    "api_on_own_ip": call(f"http://{{own_ip}}:8000/health"),
    "own_port_health": call(f"http://127.0.0.1:{{own}}/health"),
    "own_port_rollouts": call(f"http://127.0.0.1:{{own}}/rollouts", body=b"{{}}", method="POST"),
    # The sandbox API (a harness's exec/write/read, and its verification context) is the control plane too.
    "api_sandbox_exec": call(f"http://127.0.0.1:8000/rollouts/{{victim}}/sandbox/exec", body=b'{{"command": "id"}}',
                             method="POST"),
    "own_port_sandbox_exec": call(f"http://127.0.0.1:{{own}}/rollouts/{{victim}}/sandbox/exec",
                                  body=b'{{"command": "id"}}', method="POST"),
    "own_port_stolen_key": call(f"http://127.0.0.1:{{own}}/v1/chat/completions", stolen, chat, "POST"),
    # Every agent's dialect is the same fence: the seat's own rollout's key only.
    "own_port_stolen_key_messages": call(f"http://127.0.0.1:{{own}}/v1/messages", stolen, messages, "POST"),
    "own_port_stolen_key_count": call(f"http://127.0.0.1:{{own}}/v1/messages/count_tokens", stolen, messages, "POST"),
    "own_port_stolen_key_responses": call(f"http://127.0.0.1:{{own}}/v1/responses", stolen, b'{{"input": "hi"}}',
                                          "POST"),
    "other_ports": sorted({{call(f"http://127.0.0.1:{{p}}/health")
                            for p in range({PROXY_PORT_BASE}, {PROXY_PORT_BASE} + 4) if p != own}}),
}}))
"""


def test_a_sandbox_reaches_no_control_api_and_no_key_but_its_own(opencode_env) -> None:
    url = opencode_env.url
    victim = create(url, task(), agent="external")
    files = {"stolen_key.txt": victim["api_key"], "victim_id.txt": victim["rollout_id"]}
    attacker, out = run_attack(url, PROBE, files=files)
    try:
        seen = json.loads(out.strip().splitlines()[-1])
        assert seen == {
            "inherited": [],
            "api": "unreachable",
            "api_rollouts": "unreachable",
            "api_on_own_ip": "unreachable",
            "own_port_health": 404,
            "own_port_rollouts": 404,
            "api_sandbox_exec": "unreachable",
            "own_port_sandbox_exec": 404,
            "own_port_stolen_key": 401,
            "own_port_stolen_key_messages": 401,
            "own_port_stolen_key_count": 401,
            "own_port_stolen_key_responses": 401,
            "other_ports": ["unreachable"],
        }, out
        assert httpx.get(f"{url}/rollouts/{victim['rollout_id']}").json()["status"] == "running"  # untouched
    finally:
        close(url, victim, attacker)


def test_keys_expire_with_their_rollout_and_upstreams_are_limited(opencode_env) -> None:
    url = opencode_env.url
    refused = httpx.post(f"{url}/rollouts", json={"task": task(), "upstream_url": "http://10.1.2.3:80"}, timeout=30)
    assert refused.status_code == 403
    assert "not allowed" in refused.text
    rollout = create(url, task(), agent="external")
    httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/finish", timeout=30)
    late = httpx.post(
        f"{url}/v1/chat/completions",
        json={"messages": []},
        timeout=30,
        headers={"authorization": f"Bearer {rollout['api_key']}"},
    )
    close(url, rollout)
    assert late.status_code == 429
    assert "completed" in late.text
    gone = httpx.post(
        f"{url}/v1/chat/completions",
        json={"messages": []},
        timeout=30,
        headers={"authorization": f"Bearer {rollout['api_key']}"},
    )
    assert gone.status_code == 401


def test_the_service_follows_no_symlink_a_sandbox_plants(opencode_env) -> None:
    url = opencode_env.url
    in_container(opencode_env, "sh", "-c", "mkdir -p /probe && echo original > /probe/victim && chmod 0755 /probe")
    # 1. TMPDIR (and the sandbox dir around it) swapped for a link to a root-owned directory;
    # 2. the OpenCode config path (old layout: ~/.config/opencode/opencode.json) linked to a root-owned file.
    plant = [
        'rm -rf "$TMPDIR"; ln -s /probe "$TMPDIR"; ls -ld "$TMPDIR"; '
        "mkdir -p ~/.config/opencode && ln -sf /probe/victim ~/.config/opencode/opencode.json; true",
        "true",
    ]
    rollout = create(url, task(setup=plant, limits={"max_turns": 1, "wall_s": 240, "cpu_s": 299}))
    status = wait(url, rollout["rollout_id"])
    close(url, rollout)
    owner = in_container(opencode_env, "stat", "-c", "%u %a", "/probe").stdout.split()
    assert owner == ["0", "755"], (owner, status["setup_results"])
    assert in_container(opencode_env, "cat", "/probe/victim").stdout == "original\n"


FILES_RACE = program("files_race")


def test_listing_files_never_reads_outside_the_work_dir(opencode_env) -> None:
    url = opencode_env.url
    wait_healthy(f"{url}/health", timeout_s=120, until=lambda health: health["warm_agents"] >= 1)
    rollout, out = run_attack(url, FILES_RACE)
    try:
        assert "racing" in out, out
        for _ in range(30):
            files = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/files", timeout=30)
            if files.status_code != 200:  # say which kill it met: the rollout's own state
                status = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}", timeout=30).json()
                pytest.fail(f"{files.status_code} {files.text}; rollout {status['status']}: {status['detail']}")
            leaked = {name: text[:80] for name, text in files.json().items() if text not in ("decoy", "")}
            leaked.pop("attack.py", None)
            assert not leaked, leaked
    finally:
        close(url, rollout)
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"


KILL_THE_LISTER = program("kill_the_lister")


def test_a_listing_whose_helper_is_killed_reads_again(opencode_env) -> None:
    # A listing can meet the uid-wide kill that ends its rollout: it is read-only, so one helper
    # killed by a signal costs a second read, not an error. The uid's own processes cannot kill it
    # (each command the service starts has a Landlock domain of its own).
    url = opencode_env.url
    rollout, out = run_attack(url, KILL_THE_LISTER)
    try:
        assert "watching" in out, out
        deadline = time.monotonic() + 30
        while True:  # until a listing shows the attempt (the killer may miss a short one)
            files = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/files", timeout=30)
            assert files.status_code == 200, files.text
            if "killed" in files.json() or "refused" in files.json():
                break
            assert time.monotonic() < deadline, files.json()
        assert "refused" in files.json(), files.json()
    finally:
        close(url, rollout)


FAKE_AGENT_SERVER = program("fake_agent_server")


def test_a_seat_served_by_a_foreign_process_is_an_infrastructure_failure(
    opencode_image, scripted_inference, network
) -> None:
    # Without pre-started servers, seat 1's port is free until its rollout starts OpenCode on it.
    container = start_opencode_env(opencode_image, network, 2, AGENT_PREWARM="off")
    url = container.url
    try:
        attacker = create(
            url,
            task(files={"fake.py": FAKE_AGENT_SERVER}, setup=[f"python3 fake.py {AGENT_PORT_BASE + 1}"]),
            agent="external",
        )
        deadline = time.monotonic() + 60
        while not httpx.get(f"{url}/rollouts/{attacker['rollout_id']}").json()["setup_results"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        victim = create(url, task())
        status = wait(url, victim["rollout_id"])
        verdict = httpx.post(f"{url}/rollouts/{victim['rollout_id']}/verify", timeout=60).json()
        assert status["status"] == "infra_failure", status
        assert verdict["reward"] is None, status
        seen = in_container(container, "sh", "-c", f"cat /sandboxes/{attacker['rollout_id']}/home/fake.log 2>/dev/null")
        assert "Basic" not in seen.stdout, seen.stdout
        assert "prompt" not in seen.stdout, seen.stdout  # no password, no prompt
        close(url, victim, attacker)
        assert httpx.get(f"{url}/health").json()["active_rollouts"] == 0
    finally:
        container.stop()


def test_held_out_data_and_other_seats_secrets_are_unreadable_by_sandbox_uids(opencode_env) -> None:
    url = opencode_env.url
    secret = "HELD-OUT-MARKER-7731"
    rollout = create(url, task(verify_commands=[f"sleep 3; test -f solution.py && echo {secret}"]))
    other = str(UID_BASE + 3)
    try:
        assert wait(url, rollout["rollout_id"])["status"] == "stopped"
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            verifying = pool.submit(httpx.post, f"{url}/rollouts/{rollout['rollout_id']}/verify", timeout=120)
            seen_in_ps = ""
            while not verifying.done():
                seen_in_ps += in_container(
                    opencode_env,
                    "setpriv",
                    f"--reuid={other}",
                    f"--regid={other}",
                    "--clear-groups",
                    "ps",
                    "-eo",
                    "args",
                ).stdout
            verdict = verifying.result().json()
        assert verdict["passed"] == verdict["total"] == 3, verdict
        assert secret not in seen_in_ps
        rid = rollout["rollout_id"]
        paths = [
            f"/data/traces/{rid}.json",
            f"/data/traces/{rid}.turns.jsonl",
            f"/sandboxes/{rid}.agent.log",
            f"/sandboxes/{rid}/agent.log",
            f"/sandboxes/{rid}/opencode.json",
        ]
        seats = [
            s
            for s in in_container(opencode_env, "ls", "/sandboxes").stdout.split()
            if sandbox_uid(opencode_env, s) != other
        ]
        paths += [
            f"/sandboxes/{s}/{p}" for s in seats for p in ("opencode.json", "home/.config/opencode/opencode.json")
        ]
        readable = [
            p
            for p in paths
            if in_container(
                opencode_env, "setpriv", f"--reuid={other}", f"--regid={other}", "--clear-groups", "head", "-c1", p
            ).returncode
            == 0
        ]
        assert readable == []
    finally:
        close(url, rollout)


def test_no_shared_directory_is_writable_by_a_sandbox_uid(opencode_env) -> None:
    stray = str(UID_BASE + 99)  # a uid of the range with no sandbox of its own
    found = in_container(
        opencode_env,
        "setpriv",
        f"--reuid={stray}",
        f"--regid={stray}",
        "--clear-groups",
        "sh",
        "-c",
        "find / \\( -path /proc -o -path /sys \\) -prune -o -writable ! -type c ! -type l -print 2>/dev/null",
    )
    assert found.stdout.split() == [], found.stdout


MEMFD = program("memfd")

MEMFD_UNDUMPABLE = program("memfd_undumpable")

SYSV_SHM = program("sysv_shm")

DELETED_FILES = program("deleted_files")


@pytest.mark.parametrize(
    ("script", "limits", "evidence"),
    [
        (MEMFD, {"memory_mb": 128, "disk_mb": 512}, "memory limit"),
        (MEMFD_UNDUMPABLE, {"memory_mb": 128}, "cannot be counted"),
        (SYSV_SHM, {"memory_mb": 128}, "memory limit"),
        (DELETED_FILES, {"disk_mb": 32}, "disk limit"),
    ],
    ids=["memfd", "memfd-undumpable", "sysv-shm", "deleted-open-files"],
)
def test_memory_and_disk_hidden_from_the_usual_counts_are_counted(opencode_env, script, limits, evidence) -> None:
    url = opencode_env.url
    rollout, _ = run_attack(url, script, limits={"wall_s": 240, **limits})
    status = wait(url, rollout["rollout_id"], timeout_s=60)
    uid = sandbox_uid(opencode_env, rollout["rollout_id"])
    close(url, rollout)
    assert status["status"] == "limit_exceeded", status
    assert evidence in status["detail"], status
    segments = in_container(opencode_env, "cat", "/proc/sysvipc/shm").stdout.splitlines()[1:]
    assert not [row for row in segments if uid in row.split()[7:10]]  # removed with the sandbox


def raw_post(url: str, head: str, body: bytes, timeout_s: float = 20) -> bytes:
    """Send a request's headers and the first bytes of its body; what the server answers meanwhile."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        try:
            return sock.recv(4096)
        except TimeoutError:
            return b"(no answer)"


def test_the_proxy_refuses_before_reading_and_bounds_every_body(opencode_env) -> None:
    url = opencode_env.url
    unauthenticated = raw_post(
        url,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer nope\r\n"
        f"content-type: application/json\r\ncontent-length: {64 << 20}\r\n",
        b"{" * 1024,
    )
    assert unauthenticated.startswith(b"HTTP/1.1 401"), unauthenticated[:200]
    rollout = create(url, task(), agent="external")
    key = rollout["api_key"]
    try:
        declared = raw_post(
            url,
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
            f"content-type: application/json\r\ncontent-length: {64 << 20}\r\n",
            b"{" * 1024,
        )
        assert declared.startswith(b"HTTP/1.1 413"), declared[:200]
        headers = {"authorization": f"Bearer {key}"}

        def chunks():
            for _ in range(40):
                yield b" " * (1 << 20)

        try:  # answered 413 once past the bound; the server may close before the client stops sending
            assert (
                httpx.post(f"{url}/v1/chat/completions", content=chunks(), headers=headers, timeout=60).status_code
                == 413
            )
        except httpx.TransportError:
            pass
        for bad in ({"messages": [], "n": 2}, {"messages": [], "max_tokens": "abc"}, {"messages": [], "stream": "yes"}):
            answer = httpx.post(f"{url}/v1/chat/completions", json=bad, headers=headers, timeout=30)
            assert answer.status_code == 400, (bad, answer.text)
        assert httpx.get(f"{url}/rollouts/{rollout['rollout_id']}").json()["turns"] == 0
    finally:
        close(url, rollout)


def test_a_rollout_ended_while_pending_stays_ended(opencode_env) -> None:
    url = opencode_env.url
    many = {f"pkg/m{i}.py": "x = 1\n" for i in range(3000)}  # placing them keeps the rollout pending a while
    rollout = create(url, task(files=many, limits={"max_turns": 1, "wall_s": 240, "cpu_s": 298}))
    finished = httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/finish", timeout=30).json()
    assert finished["status"] == "completed"
    time.sleep(3)
    later = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}", timeout=30).json()
    close(url, rollout)
    assert (later["status"], later["detail"], later["turns"]) == ("completed", "finished by the client", 0), later


def test_removing_a_huge_sandbox_does_not_stall_the_service(opencode_env) -> None:
    url = opencode_env.url
    tree = "import os\nos.makedirs('t')\nfor i in range(150000):\n    open(f't/{i}', 'w').close()\nprint('made')\n"
    rollout, out = run_attack(url, tree)
    assert "made" in out, out
    order: list[str] = []
    deleting = threading.Thread(
        target=lambda: (httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}", timeout=120), order.append("delete"))
    )
    deleting.start()
    time.sleep(0.05)
    assert httpx.get(f"{url}/health", timeout=120).status_code == 200
    order.append("health")
    deleting.join()
    assert order == ["health", "delete"]  # answered while the tree was being removed


def test_a_restart_answers_waiting_clients_and_records_running_rollouts_as_infra_failures(
    opencode_image, scripted_inference, network
) -> None:
    container = start_opencode_env(opencode_image, network, 2)
    try:
        url = container.url
        rollout = create(url, task(setup=["sleep 600"], limits={"wall_s": 900}))
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                httpx.post, f"{url}/rollouts/{rollout['rollout_id']}/wait", params={"timeout_s": 300}, timeout=120
            )
            time.sleep(1)
            container.get_wrapped_container().restart(timeout=20)
            answer = waiting.result()
        assert answer.status_code == 503, answer.text
        assert "restart" in answer.text, answer.text
        url = container.url = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8000)}"
        wait_healthy(f"{url}/health", timeout_s=60)
        after = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}").json()
        assert after["status"] == "infra_failure", after
        assert "service restarted" in after["detail"], after
        left = in_container(container, "ls", "/sandboxes").stdout.split()
        assert rollout["rollout_id"] not in left
        assert not [name for name in left if name.endswith(".agent.log")]
    finally:
        container.stop()
