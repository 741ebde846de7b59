"""Local per-rollout sandboxes: one unprivileged uid, one 0700 directory, rlimits, a watchdog.

Isolation model (see README): each concurrent rollout runs as its own uid from a fixed pool, in a
directory only that uid can enter, in its own session/process group, with rlimits on processes
(RLIMIT_NPROC counts every process and thread of the uid), CPU seconds per process, file size and
core dumps. A watchdog polls the uid's resident memory and the work dir's size and kills the whole
uid when either passes its limit. iptables owner rules (set once at start-up) let the uid range reach
only the proxy port on loopback (and answer connections the service opens to them there). Killing
means SIGKILL to every process of the uid, so nothing the agent started survives, whatever session
it moved to.
"""

import asyncio
import os
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .tasks import Limits

MB = 1 << 20


@dataclass
class CommandResult:
    """Outcome of a command run in the sandbox."""

    command: str
    exit_code: Optional[int]
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False


def processes_of(uid: int) -> list[tuple[int, int]]:
    """(pid, resident kB) of every live (not zombie) process whose real uid is ``uid``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
        zombie = fields.get("State", "").strip().startswith("Z")  # already dead, waiting to be reaped
        if int(fields.get("Uid", "-1").split()[0]) == uid and not zombie:
            found.append((int(entry.name), int(fields.get("VmRSS", "0 kB").split()[0])))
    return found


def directory_bytes(path: Path) -> int:
    """Total size of the regular files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path, onerror=lambda _: None):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def apply_network_rules(uid_first: int, uid_last: int, proxy_port: int) -> None:
    """Let the sandbox uids reach only 127.0.0.1:proxy_port (idempotent). Raises on failure.

    They may also answer, on loopback, connections opened to them (the service driving each agent's
    OpenCode server); a connection they open themselves to anything but the proxy is rejected.
    """
    owner = ["-m", "owner", "--uid-owner", f"{uid_first}-{uid_last}"]
    rules = [
        ("iptables", [*owner, "-o", "lo", "-d", "127.0.0.1", "-p", "tcp", "--dport", str(proxy_port), "-j", "ACCEPT"]),
        ("iptables", [*owner, "-o", "lo", "-p", "tcp", "-m", "conntrack", "--ctstate", "ESTABLISHED", "-j", "ACCEPT"]),
        ("iptables", [*owner, "-j", "REJECT"]),
        ("ip6tables", [*owner, "-j", "REJECT"]),
    ]
    for tool, rule in rules:
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed")
        if subprocess.run([tool, "-C", "OUTPUT", *rule], capture_output=True).returncode != 0:
            subprocess.run([tool, "-A", "OUTPUT", *rule], check=True, capture_output=True, text=True)


class Sandbox:
    """The directory, uid and processes of one rollout."""

    def __init__(self, root: Path, rollout_id: str, uid: int, limits: Limits) -> None:
        self.dir = root / rollout_id
        self.home = self.dir / "home"
        self.work = self.dir / "work"
        self.uid = uid
        self.limits = limits
        self.violation: Optional[str] = None

    def create(self) -> None:
        """Make the empty 0700 sandbox (work dir and HOME) owned by the uid, killing what the uid still runs."""
        self.kill_all()  # a previous holder of this uid must be gone
        shutil.rmtree(self.dir, ignore_errors=True)
        for path in (self.dir, self.home, self.work):
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, self.uid, self.uid)
        self.dir.chmod(0o700)

    def add_files(self, files: dict[str, str]) -> None:
        """Place the task's files in the work dir, owned by the uid."""
        for name, text in files.items():
            target = self.work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        for root, dirs, names in os.walk(self.work):
            for name in [*dirs, *names]:
                os.lchown(os.path.join(root, name), self.uid, self.uid)

    @property
    def log_path(self) -> Path:
        """The agent's output, beside (not inside) the sandbox so the agent cannot rewrite it."""
        return self.dir.parent / f"{self.dir.name}.agent.log"

    def env(self, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        """A clean environment rooted in the sandbox's HOME."""
        home = str(self.home)
        env = {
            "HOME": home, "USER": "sandbox", "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
            "TMPDIR": str(self.dir / "tmp"), "XDG_CONFIG_HOME": f"{home}/.config", "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_CACHE_HOME": f"{home}/.cache", "XDG_STATE_HOME": f"{home}/.local/state",
        }
        (self.dir / "tmp").mkdir(exist_ok=True)
        os.chown(self.dir / "tmp", self.uid, self.uid)
        return {**env, **(extra or {})}

    def _demote(self) -> None:
        # Runs in the child between fork and exec: new session, limits, then drop to the uid.
        os.setsid()
        limits = self.limits
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))
        # Soft limit: SIGXCPU (the process can tell why it died); hard limit a second later: SIGKILL.
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.disk_mb * MB, limits.disk_mb * MB))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.setgroups([])
        os.setgid(self.uid)
        os.setuid(self.uid)

    async def spawn(self, argv: list[str], env: dict[str, str], stdout, stderr, stdin=asyncio.subprocess.DEVNULL):
        """Start ``argv`` in the sandbox (own session, limits, the uid); returns the process."""
        return await asyncio.create_subprocess_exec(
            *argv, cwd=self.work, env=env, stdin=stdin, stdout=stdout, stderr=stderr, preexec_fn=self._demote,
        )

    async def run(self, command: str, timeout_s: float, stdin: str = "", env: Optional[dict[str, str]] = None) -> CommandResult:
        """Run a shell command to completion in the sandbox; kills it at the timeout."""
        started = time.monotonic()
        pipe = asyncio.subprocess.PIPE
        proc = await self.spawn(["bash", "-c", command], env or self.env(), pipe, pipe,
                                stdin=pipe if stdin else asyncio.subprocess.DEVNULL)
        try:
            out, err = await asyncio.wait_for(_communicate(proc, stdin.encode()), timeout_s)
            return CommandResult(command, proc.returncode, _text(out), _text(err), time.monotonic() - started)
        except asyncio.TimeoutError:
            self.kill_group(proc.pid)
            out, err = await _communicate(proc, b"")
            return CommandResult(command, None, _text(out), _text(err), time.monotonic() - started, timed_out=True)

    @staticmethod
    def kill_group(pgid: int) -> None:
        """SIGKILL one process group (a command and its children)."""
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self, timeout_s: float = 1.0) -> int:
        """SIGKILL every process of the uid until none is left (repeated passes catch processes forked
        meanwhile); returns how many were killed."""
        killed, deadline = 0, time.monotonic() + timeout_s
        while (procs := processes_of(self.uid)) and time.monotonic() < deadline:
            for pid, _ in procs:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.005)
        return killed

    async def watch(self, interval_s: float = 0.5) -> str:
        """Return (and kill everything) once memory or disk passes its limit; run as a task."""
        tick = 0
        while True:
            await asyncio.sleep(interval_s)
            rss_mb = sum(kb for _, kb in processes_of(self.uid)) / 1024
            if rss_mb > self.limits.memory_mb:
                self.violation = f"memory limit: {rss_mb:.0f} MB resident > {self.limits.memory_mb} MB"
            elif tick % 4 == 0 and (used := directory_bytes(self.dir) / MB) > self.limits.disk_mb:
                self.violation = f"disk limit: {used:.0f} MB > {self.limits.disk_mb} MB"
            tick += 1
            if self.violation:
                self.kill_all()
                return self.violation

    def list_files(self, max_files: int = 64, max_bytes: int = 64 * 1024) -> dict[str, str]:
        """Text of the work dir's files (small ones first come, up to the limits)."""
        files: dict[str, str] = {}
        for path in sorted(self.work.rglob("*")):
            if len(files) >= max_files:
                break
            if path.is_file() and not path.is_symlink() and ".git" not in path.parts and path.stat().st_size <= max_bytes:
                files[path.relative_to(self.work).as_posix()] = path.read_text(errors="replace")
        return files

    def destroy(self) -> None:
        """Kill every process of the uid and remove the directory and the agent's log."""
        self.kill_all()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)


async def _communicate(proc: asyncio.subprocess.Process, data: bytes) -> tuple[bytes, bytes]:
    """Feed stdin (ignoring a program that exits without reading it) and collect stdout/stderr."""

    async def feed() -> None:
        if proc.stdin is None:
            return
        try:
            proc.stdin.write(data)
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            pass

    _, out, err = await asyncio.gather(feed(), proc.stdout.read(), proc.stderr.read())
    await proc.wait()
    return out, err


def _text(data: Optional[bytes], limit: int = 64 * 1024) -> str:
    return (data or b"")[-limit:].decode(errors="replace")

