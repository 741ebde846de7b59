"""The check's child processes: each logged to a file and bounded by a timeout, and the local
reasoning-gym-env server."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ...envs.errors import EnvUnavailable
from ...envs.readiness import answers_health, wait_until_healthy


class StageTimeout(Exception):
    """A child outlived its timeout (it and its process group were killed)."""


class ChildFailed(Exception):
    """A child exited non-zero; the message ends with its log's last lines."""


def log_tail(log: Path, lines: int = 8) -> str:
    """The last ``lines`` non-empty lines of ``log``."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def run_logged(
    command: list[str],
    log: Path,
    timeout_s: float,
    env: Mapping[str, str],
    cancel: threading.Event | None = None,
) -> None:
    """Run ``command`` with its output appended to ``log``; ``StageTimeout`` or ``ChildFailed``
    (also when ``cancel`` is set: the child and its process group are killed)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    what = " ".join(command[2:5])
    deadline = time.monotonic() + timeout_s
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True)
        while (code := _wait(child, 0.5)) is None:
            if time.monotonic() > deadline or (cancel is not None and cancel.is_set()):
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                if cancel is not None and cancel.is_set():
                    raise ChildFailed(f"{what}: cancelled")
                raise StageTimeout(f"{what} ran past {timeout_s:.0f} s")
    if code != 0:
        raise ChildFailed(f"{what} exited {code}: {log_tail(log)}")


def _wait(child: subprocess.Popen, seconds: float) -> int | None:
    try:
        return child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def free_port() -> int:
    """A TCP port free on the loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def local_env_server(log: Path, timeout_s: float, env: Mapping[str, str]) -> Iterator[str]:
    """reasoning-gym-env as a local process on a free port: its URL once ``/health`` answers."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "reasoning_gym_env_server"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "HOST": "127.0.0.1", "PORT": str(port)},
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy(url: str) -> bool:
        if server.poll() is not None:
            raise ChildFailed(f"reasoning-gym-env exited {server.returncode}: {log_tail(log)}")
        return answers_health(url)

    try:
        try:
            wait_until_healthy({"reasoning-gym-env": url}, timeout_s, healthy=healthy)
        except EnvUnavailable:
            raise StageTimeout(f"reasoning-gym-env did not answer /health within {timeout_s:.0f} s") from None
        print(f"host-check: reasoning-gym-env listening on {url} (log {log})", flush=True)
        yield url
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
