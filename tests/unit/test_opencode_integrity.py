"""Reward integrity, in-process: processes that hide behind a zombie leader, trees too deep for a
recursive walk, names that are not UTF-8, the work dir's copy for the checks, the proxy's field
allow-list, output comparison modes and request-body bounds."""

import asyncio
import io
import json
import os
import platform
import subprocess
import threading

import pytest
from opencode_env_client.models import RUNNING, Limits, RolloutRequest, Task, TestCase
from opencode_env_server.api.http_limits import BodyRefused, read_body
from opencode_env_server.proxy.chat_completions import Proxy, StreamAccumulator, refused_fields
from opencode_env_server.rollouts.rollout import LimitReached, Rollout
from opencode_env_server.rollouts.trace import TraceStore
from opencode_env_server.rollouts.verification import output_matches
from opencode_env_server.sandbox import inside, tree
from opencode_env_server.sandbox.processes import kill_uid, processes_of, tasks_of
from opencode_env_server.sandbox.usage import disk_bytes, memory_bytes
from opencode_env_server.settings import Settings

from .test_opencode_isolation import STRAY_UID, SYSTEM_PYTHON, needs_root

pytestmark = pytest.mark.unit

SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine())
# The main thread exits with the raw exit syscall (not exit_group): /proc/<pid>/status then says
# "Z (zombie)" while the other thread runs on, holding 64 MB.
ZOMBIE_LEADER = f"""
import ctypes, threading, time
held = bytearray(64 << 20)
for i in range(0, len(held), 4096):
    held[i] = 1
threading.Thread(target=lambda: time.sleep(60)).start()
print("ready", flush=True)
ctypes.CDLL(None).syscall({SYS_EXIT}, 0)
"""


@needs_root
@pytest.mark.skipif(SYS_EXIT is None, reason="raw exit syscall number unknown here")
def test_a_process_behind_a_zombie_leader_is_counted_and_killed() -> None:
    def demote() -> None:
        os.setgid(STRAY_UID)
        os.setuid(STRAY_UID)

    hider = subprocess.Popen(
        [SYSTEM_PYTHON, "-I", "-S", "-c", ZOMBIE_LEADER], stdout=subprocess.PIPE, text=True, preexec_fn=demote, cwd="/"
    )
    try:
        assert hider.stdout.readline() == "ready\n"
        for _ in range(100):  # until the leader has exited
            with open(f"/proc/{hider.pid}/status") as status:
                if "zombie" in status.read():
                    break
        [process] = processes_of(STRAY_UID)
        assert process.pid == hider.pid
        assert process.live_task != f"/proc/{hider.pid}/task/{hider.pid}"
        assert memory_bytes(STRAY_UID) >= 64 << 20
        threading.Thread(target=hider.wait).start()  # reaped as the service's child watcher does
        kill_uid(STRAY_UID)
        assert tasks_of(STRAY_UID) == []
    finally:
        hider.kill()
        hider.wait()


def _deep(root, levels: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def test_a_tree_too_deep_for_recursion_is_a_limit_and_is_removed(tmp_path) -> None:
    (tmp_path / "t").mkdir()
    _deep(tmp_path / "t", 3000)
    fd = os.open(tmp_path / "t", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(tree.TreeLimit, match="deeper than 256"):
            disk_bytes(fd, uid=-1)
        assert len(list(tree.walk(fd, max_depth=5000))) == 3000  # no RecursionError at any depth
    finally:
        os.close(fd)
    tree.remove(tmp_path / "t")
    assert not (tmp_path / "t").exists()
    tree.remove(tmp_path / "t")  # gone already: no error


def test_listing_escapes_names_that_are_not_utf8_and_notes_a_cut_walk(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open(b"bad\xff.txt", "w") as f:
        f.write("x")
    (tmp_path / "ok.py").write_text("print(1)")
    _deep(tmp_path, 70)
    listed = inside.listing(64, 65536, 1 << 20, 20000, 256)
    assert listed["files"] == {"bad\\xff.txt": "x", "ok.py": "print(1)"}
    assert listed["skipped"] == ["(listing stopped: directories nested deeper than 64 levels)"]


def test_the_copy_for_the_checks_carries_files_and_dirs_only(tmp_path, monkeypatch) -> None:
    work, copy = tmp_path / "work", tmp_path / "copy"
    for d in (work / "pkg", work / ".git" / "hooks", copy):
        d.mkdir(parents=True)
    (work / "pkg" / "m.py").write_text("x = 1\n")
    (work / "run.sh").write_text("echo hi\n")
    os.chmod(work / "run.sh", 0o4755)  # setuid bit: not carried
    (work / ".git" / "hooks" / "pre-commit").write_text("evil")
    (work / "link").symlink_to("/etc/passwd")
    with open(os.path.join(os.fsencode(work), b"n\xfe"), "w") as f:
        f.write("raw name")
    stream = io.BytesIO()
    monkeypatch.chdir(work)
    inside.pack(stream, 1 << 20)
    stream.seek(0)
    monkeypatch.chdir(copy)
    inside.unpack(stream, 1 << 20)
    assert sorted(os.listdir(copy)) == sorted(["pkg", "run.sh", os.fsdecode(b"n\xfe")])
    assert (copy / "pkg" / "m.py").read_text() == "x = 1\n"
    assert (copy / "run.sh").stat().st_mode & 4095 == 493


def _copy(work, copy, monkeypatch, max_bytes: int) -> bytes:
    stream = io.BytesIO()
    monkeypatch.chdir(work)
    inside.pack(stream, max_bytes)
    monkeypatch.chdir(copy)
    inside.unpack(io.BytesIO(stream.getvalue()), max_bytes)
    return stream.getvalue()


def test_a_file_with_many_names_is_copied_once_and_stays_one_file(tmp_path, monkeypatch) -> None:
    work, copy = tmp_path / "work", tmp_path / "copy"
    work.mkdir()
    copy.mkdir()
    (work / "a").write_bytes(b"x" * 300_000)
    for i in range(40):  # 40 more names: 12 MB if each were copied in full
        os.link(work / "a", work / f"b{i}")
    stream = _copy(work, copy, monkeypatch, 1 << 20)  # one 300 kB file fits a 1 MB bound
    assert len(stream) < 310_000, len(stream)
    assert (copy / "b7").read_bytes() == b"x" * 300_000
    assert os.stat(copy / "b7").st_ino == os.stat(copy / "a").st_ino


def test_a_sparse_file_counts_at_its_apparent_size(tmp_path, monkeypatch) -> None:
    work, copy = tmp_path / "work", tmp_path / "copy"
    work.mkdir()
    copy.mkdir()
    with open(work / "sparse", "wb") as f:
        f.truncate(64 << 20)  # 64 MB apparent, no block allocated
    (work / "small").write_text("ok")
    with pytest.raises(inside.CopyLimit, match="more than 16 MB"):
        _copy(work, copy, monkeypatch, 16 << 20)
    assert not (copy / "sparse").exists()  # nothing of it was written


def test_unpack_bounds_what_it_writes_and_refuses_links_to_unknown_files(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(inside.CopyLimit):
        inside.unpack(io.BytesIO(b'{"path": "a", "dir": false, "mode": 420, "size": 9}\n123456789'), 8)
    with pytest.raises(ValueError, match="not in the stream"):
        inside.unpack(io.BytesIO(b'{"path": "b", "dir": false, "link": "../../etc/passwd"}\n'), 8)


@pytest.mark.parametrize("path", ["../x", "/etc/x", "a/../../x", "./a"])
def test_unpack_refuses_paths_that_leave_the_copy(tmp_path, monkeypatch, path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="bad path"):
        inside.unpack(io.BytesIO(b'{"path": "%s", "dir": false, "mode": 420, "size": 1}\nx' % path.encode()), 9)


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        (
            {
                "messages": [],
                "temperature": 0.0,
                "top_p": 0.1,
                "seed": 3,
                "stream": True,
                "tools": [],
                "tool_choice": "auto",
            },
            None,
        ),
        ({"messages": [], "allowed_token_ids": [1, 2]}, "'allowed_token_ids'"),
        ({"messages": [], "structured_outputs": {"regex": "a+"}}, "'structured_outputs'"),
        ({"messages": [], "min_tokens": 50, "ignore_eos": True}, "'ignore_eos', 'min_tokens'"),
        ({"messages": [], "logit_bias": {"7": 100}}, "'logit_bias'"),
        ({"messages": [], "response_format": {"type": "json_object"}}, "'response_format'"),
        ({"messages": [], "tool_choice": "required"}, "guided decoding"),
        ({"messages": [], "tool_choice": {"type": "function", "function": {"name": "bash"}}}, "guided decoding"),
    ],
)
def test_a_recorded_rollout_relays_only_allow_listed_fields(body, refused) -> None:
    found = refused_fields(body)
    assert (found is None) if refused is None else (refused in found), found


def test_the_trainers_sampling_replaces_the_agents() -> None:
    class Rollout:
        model, record_turns, top_logprobs = "policy", True, None
        sampling = {"temperature": 1.0, "top_p": 1.0}

    forwarded = Proxy(None).prepare(
        Rollout(), {"messages": [], "temperature": 0.0, "top_p": 0.1, "seed": 3, "max_tokens": 99}, max_tokens=50
    )
    assert forwarded == {
        "messages": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "model": "policy",
        "max_tokens": 50,
        "logprobs": True,
        "return_token_ids": True,
    }


@pytest.mark.parametrize(
    ("compare", "stdout", "passed"),
    [
        ("trimmed", "  cba\n", True),
        ("trimmed", "c b a", False),
        ("exact", "cba\n", True),
        ("exact", "cba", False),
        ("lines", "cba  \n\n", True),
        ("lines", " cba\n", False),
        ("tokens", " cba \n", True),
        ("tokens", "cb a", False),
    ],
)
def test_output_comparison_modes(compare, stdout, passed) -> None:
    assert output_matches(TestCase(expected_stdout="cba\n", compare=compare), stdout) is passed


def test_request_bodies_are_bounded_in_size_and_pace() -> None:
    async def chunks(*messages, stall: bool = False):
        queue = list(messages)

        async def receive():
            if not queue:
                await asyncio.sleep(10 if stall else 0)
            return queue.pop(0)

        return receive

    async def scenario() -> None:
        whole = await chunks(
            {"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"c"}
        )
        assert await read_body(whole, b"3", 10, 1.0) == b"abc"
        with pytest.raises(BodyRefused, match="exceeds 10 bytes") as declared:
            await read_body(whole, b"11", 10, 1.0)
        assert declared.value.status == 413
        big = await chunks(*[{"type": "http.request", "body": b"x" * 6, "more_body": True}] * 2)
        with pytest.raises(BodyRefused) as streamed:
            await read_body(big, None, 10, 1.0)
        assert streamed.value.status == 413
        stalled = await chunks({"type": "http.request", "body": b"x", "more_body": True}, stall=True)
        with pytest.raises(BodyRefused, match="no request body data") as idle:
            await read_body(stalled, None, 10, 0.2)
        assert idle.value.status == 408

    asyncio.run(scenario())


def test_calls_in_flight_reserve_their_tokens_so_parallel_calls_cannot_overshoot(tmp_path) -> None:
    settings = Settings(max_concurrent_rollouts=1, agent_prewarm=False, sandbox_root=tmp_path / "sb")
    limits = Limits(max_completion_tokens=100, max_tokens_per_turn=40)
    rollout = Rollout(
        RolloutRequest(task=Task(instruction="x", limits=limits), agent="external"),
        settings,
        0,
        "m",
        TraceStore(tmp_path / "traces"),
    )
    rollout.status = RUNNING
    granted = [rollout.admit_call(None), rollout.admit_call(30), rollout.admit_call(None)]
    assert granted == [40, 30, 30]  # the per-turn cap, what was asked, what is left
    with pytest.raises(LimitReached, match="reserved by this rollout's calls in flight"):
        rollout.admit_call(None)
    assert rollout.status == RUNNING  # a parallel call is refused, the rollout goes on
    rollout.release(40)  # the first call answered with 10 tokens
    rollout.completion_tokens += 10
    assert rollout.admit_call(None) == 30  # 100 - 10 used - 60 still reserved


def test_a_reply_cut_at_a_stop_string_is_recorded_untrainable() -> None:
    def sse(*chunks: dict) -> bytes:
        return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)

    acc = StreamAccumulator()
    acc.feed(
        sse(
            {"choices": [{"index": 0, "delta": {"content": "ls"}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "\n```"}]},
        )
    )
    assert acc.response()["choices"][0]["stop_reason"] == "\n```"
    ended = StreamAccumulator()
    ended.feed(
        sse({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop", "stop_reason": None}]})
    )
    assert "stop_reason" not in ended.response()["choices"][0]  # an end-of-sequence stop: the reply as it was
