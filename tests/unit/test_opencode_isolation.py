"""OpenCode env isolation logic that runs in-process: request checks, seats and keys, upstream
allow-list, trace permissions and restart records, disk accounting, log rate limiting."""

import asyncio
import logging
import os
import stat
import sys

import pytest
from opencode_env_client.models import FINAL, INFRA_FAILURE, Limits, RolloutRequest, Task
from opencode_env_server.logs import RateLimit
from opencode_env_server.proxy.chat_completions import request_error
from opencode_env_server.rollouts.manager import RolloutManager
from opencode_env_server.rollouts.seats import Prepared
from opencode_env_server.rollouts.trace import TraceStore
from opencode_env_server.sandbox.sandbox import Sandbox
from opencode_env_server.sandbox.usage import disk_bytes
from opencode_env_server.settings import Settings, normalize_upstream

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"messages": []}, None),
        ({"messages": [], "n": 1, "max_tokens": 5, "stream": True, "tools": [], "stream_options": {}}, None),
        ([], "'messages' list"),
        ({"messages": "hi"}, "'messages' list"),
        ({"messages": [], "n": 2}, "'n' must be 1"),
        ({"messages": [], "max_tokens": "abc"}, "'max_tokens' must be a positive integer"),
        ({"messages": [], "max_completion_tokens": True}, "'max_completion_tokens' must be a positive integer"),
        ({"messages": [], "max_tokens": 0}, "positive integer"),
        ({"messages": [], "stream": "yes"}, "'stream' must be a bool"),
        ({"messages": [], "tools": {}}, "'tools' must be a list"),
    ],
)
def test_request_error_names_what_cannot_be_relayed(body, problem) -> None:
    found = request_error(body)
    assert (found is None) if problem is None else (problem in found)


def test_seat_ports_upstreams_and_overlaps() -> None:
    settings = Settings(
        max_concurrent_rollouts=2,
        agent_spares=1,
        inference_url="http://inference:8000",
        allowed_upstreams=("http://other:9000",),
    )
    assert settings.seats == 3
    assert [settings.seat_of_proxy_port(p) for p in (24000, 24002, 24003, 8000)] == [0, 2, None, None]
    assert settings.upstream_allowed("http://inference:8000/v1/")
    assert settings.upstream_allowed("http://other:9000")
    assert not settings.upstream_allowed("http://10.0.0.1:22")
    assert normalize_upstream("http://x:1/v1/") == "http://x:1"
    with pytest.raises(SystemExit, match="overlap"):
        Settings(max_concurrent_rollouts=4, sandbox_proxy_port_base=41002).check()


def test_a_key_is_accepted_only_on_its_own_seats_port(tmp_path) -> None:
    async def scenario() -> None:
        settings = Settings(max_concurrent_rollouts=2, agent_prewarm=False, sandbox_root=tmp_path / "sb")
        manager = RolloutManager(settings, TraceStore(tmp_path / "traces"))
        rollout = manager.create(RolloutRequest(task=Task(instruction="x"), agent="external"), "m")
        rollout.runner.cancel()
        seat = rollout.seat
        assert manager.caller(rollout.key, seat) == (rollout, False)
        assert manager.caller(rollout.key, None) == (rollout, False)  # the API port: external agents
        assert manager.caller(rollout.key, 1 - seat) == (None, False)  # stolen, used from another seat
        sandbox = Sandbox(tmp_path / "sb", "w", 20001, Limits(), sys.executable)
        manager.seats.warming["warm-key"] = Prepared(
            "w", "warm-key", 1, Limits(), sandbox, manager.seats.agent(sandbox, 1)
        )
        assert manager.caller("warm-key", 1) == (None, True)
        assert manager.caller("warm-key", 0) == (None, False)
        assert manager.caller("nope", None) == (None, False)

    asyncio.run(scenario())


def test_traces_are_root_only_and_unfinished_rollouts_become_infra_failures(tmp_path) -> None:
    store = TraceStore(tmp_path / "traces")
    store.write_summary("done", {"status": "completed"})
    store.write_summary("cut", {"status": "running"})
    assert stat.S_IMODE(os.stat(tmp_path / "traces").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "traces" / "cut.json").st_mode) == 0o600
    assert store.mark_unfinished(FINAL, INFRA_FAILURE, "service restarted") == 1
    assert store.load("cut")[0]["status"] == INFRA_FAILURE
    assert store.load("done")[0]["status"] == "completed"
    assert store.load(".cut") is None
    assert store.load("../x") is None


def test_disk_usage_counts_blocks_once_and_follows_no_link(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * (1 << 20))
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_bytes(b"y" * (256 << 10))
    os.link(tree / "d" / "f", tree / "hardlink")
    (tree / "link").symlink_to(outside)
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        used = disk_bytes(fd, uid=-1)
    finally:
        os.close(fd)
    assert (256 << 10) <= used < (1 << 20)


def test_listing_skips_a_name_that_is_a_directory_by_the_time_it_is_opened(tmp_path, monkeypatch) -> None:
    # The agent swaps a directory and a symlink: the walk saw "x" as a file, the open finds a directory.
    from opencode_env_server.sandbox import inside

    (tmp_path / "a.py").write_text("print(1)")
    (tmp_path / "x").mkdir()
    walk = inside.walk

    def raced(*args, **kwargs):
        for entry in walk(*args, **kwargs):
            if entry.name == "x":
                entry = type(entry)(entry.dir_fd, entry.path, entry.name, (tmp_path / "a.py").stat())
            yield entry

    monkeypatch.setattr(inside, "walk", raced)
    monkeypatch.chdir(tmp_path)
    assert inside.listing(64, 65536, 1 << 20, 20000, 256) == {"files": {"a.py": "print(1)"}, "skipped": []}


def test_rate_limit_passes_a_burst_then_counts_what_it_dropped(monkeypatch) -> None:
    clock = [0.0]
    monkeypatch.setattr("opencode_env_server.logs.time.monotonic", lambda: clock[0])
    limit = RateLimit(burst=3, interval_s=10)

    def record(level: int = logging.WARNING) -> logging.LogRecord:
        return logging.LogRecord("svc", level, __file__, 1, "bad request", None, None)

    assert [limit.filter(record()) for _ in range(5)] == [True, True, True, False, False]
    assert limit.filter(record(logging.INFO))
    clock[0] = 11.0
    later = record()
    assert limit.filter(later)
    assert "2 similar lines suppressed" in later.getMessage()


def test_a_seat_port_counts_as_ours_only_if_our_process_group_listens_on_it(tmp_path) -> None:
    import socket
    import subprocess
    import sys
    import time

    from opencode_env_server.rollouts.agent_server import AgentFailed, AgentServer

    class Started:  # what AgentServer needs of its process: the group leader's pid, alive
        pid, returncode = os.getpgid(0), None

    mine = socket.create_server(("127.0.0.1", 0))
    agent = AgentServer(Sandbox(tmp_path, "r", os.getuid(), Limits(), sys.executable), mine.getsockname()[1], http=None)
    agent.process = Started()
    agent.check_listener()  # our own group holds the only listener
    mine.close()
    with pytest.raises(AgentFailed, match="not served"):
        agent.check_listener()  # gone
    foreign = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time\n"
            "s = socket.create_server(('127.0.0.1', 0)); print(s.getsockname()[1], flush=True)\n"
            "time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        agent.port = int(foreign.stdout.readline())
        time.sleep(0.1)
        with pytest.raises(AgentFailed, match="foreign"):
            agent.check_listener()  # another process group (another seat's uid, in the service)
    finally:
        foreign.kill()


STRAY_UID = 61999  # no account, no sandbox: a uid only this test runs as
SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's interpreter may sit where that uid cannot reach

# Holds a 4 MB memfd and is non-dumpable (/proc/<pid>/fd closed to the uid) for argv[1] seconds, or
# for good with "forever": a moment of it is what the kernel does to a command the root service
# starts as the uid, until it execs.
HOLD_MEMFD = """
import ctypes, os, sys, time
prctl = ctypes.CDLL(None).prctl
fd = os.memfd_create("held")
os.write(fd, b"x" * (4 << 20))
prctl(4, 0)  # PR_SET_DUMPABLE 0
print("hidden", flush=True)
if sys.argv[1] != "forever":
    time.sleep(float(sys.argv[1]))
    prctl(4, 1)
time.sleep(30)
"""


def _hold_as_stray_uid(hidden: str):
    import subprocess

    def demote() -> None:
        os.setgid(STRAY_UID)
        os.setuid(STRAY_UID)

    holder = subprocess.Popen(
        [SYSTEM_PYTHON, "-I", "-S", "-c", HOLD_MEMFD, hidden],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=demote,
        cwd="/",
    )
    assert holder.stdout.readline() == "hidden\n"
    return holder


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON), reason="starts a system Python as another uid: needs root"
)


@needs_root
@pytest.mark.parametrize("hidden", ["0.3", "forever"])
def test_a_moment_of_unreadable_files_is_waited_out_and_hiding_for_good_is_caught(hidden: str) -> None:
    from opencode_env_server.sandbox.usage import HiddenFiles, memory_bytes

    holder = _hold_as_stray_uid(hidden)
    try:
        if hidden == "forever":
            with pytest.raises(HiddenFiles, match=f"process /proc/{holder.pid}/task/{holder.pid} hides"):
                memory_bytes(STRAY_UID)
        else:
            assert memory_bytes(STRAY_UID) >= 4 << 20  # counted once readable: its memfd is in no resident set
    finally:
        holder.kill()
        holder.wait()


@needs_root
def test_the_grace_is_one_budget_per_scan_not_per_process() -> None:
    from opencode_env_server.sandbox.processes import Process
    from opencode_env_server.sandbox.usage import HiddenFiles, _open_files, as_uid

    # Each alone is readable within the 2 s grace (after 1.5 s, then 1.5 s more), not both in one scan.
    first = _hold_as_stray_uid("1.5")
    second = _hold_as_stray_uid("3")
    try:
        with as_uid(STRAY_UID), pytest.raises(HiddenFiles, match=f"process /proc/{second.pid} hides"):
            list(_open_files([Process(h.pid, f"/proc/{h.pid}") for h in (first, second)], grace_s=2.0))
    finally:
        for holder in (first, second):
            holder.kill()
            holder.wait()
