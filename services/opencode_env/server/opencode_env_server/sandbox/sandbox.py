"""Local per-rollout sandboxes: one unprivileged uid, a root-owned directory, rlimits, a watchdog.

Layout of ``<SANDBOX_ROOT>/<rollout id>/`` (root:<uid> 0710, so the uid can enter it but change
nothing in it, and no other uid can enter it):

- ``work/``, ``home/``, ``tmp/``: owned by the uid, 0700; the agent's work dir, HOME and TMPDIR;
- ``opencode.json``: root:<uid> 0440, the agent's config (its proxy key);
- ``agent.log``: root 0600, the agent's events.

The root service never opens, creates, chowns or walks a path inside the uid's directories by
name: files are placed, read and packed by a helper process running as the uid (``inside``: the
kernel's permission checks apply), sizes are summed by directory fds without following symlinks or
recursing (``tree``), and removal happens only once the uid has no process left.
See services/opencode_env/README.md "Threat model" for the whole isolation model.
"""

import asyncio
import logging
import os
import resource
import signal
import stat
import time
from pathlib import Path
from typing import Any

import orjson
from opencode_env_client.models import CommandOutcome, Limits

from . import landlock, processes, tree, usage
from .inside import COPY_LIMIT_EXIT

log = logging.getLogger("opencode_env_server.sandbox")

MB = 1 << 20
OWNED_DIRS = ("work", "home", "tmp")
HELPER_TIMEOUT_S = 30.0
OUTPUT_TAIL_BYTES = 64 * 1024
HELPER_OUTPUT_BYTES = 8 << 20  # a JSON listing of at most 1 MB of file text
# The image's sandbox tools (python3 with pytest, docker/opencode-env.Dockerfile) come first.
SANDBOX_PATH = "/opt/sandbox-tools/bin:/usr/local/bin:/usr/bin:/bin"

# The helper's entry point: this package's directory first on sys.path (with -I neither PYTHONPATH,
# the user's site-packages nor the work dir is on it).
_RUN_INSIDE = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
    "from opencode_env_server.sandbox.inside import main; main(*sys.argv[1:])"
)


class SandboxError(RuntimeError):
    """A helper run as the sandbox's uid failed (the uid's own files are in the way)."""


class HelperKilled(SandboxError):
    """A helper died of a signal: the uid-wide kill that ends a rollout got it."""


class CopyTooLarge(SandboxError):
    """The work dir holds more than its copy may carry (the rollout's ``disk_mb``, apparent size)."""


class Sandbox:
    """The directory, uid and processes of one rollout."""

    def __init__(self, root: Path, rollout_id: str, uid: int, limits: Limits, python: str) -> None:
        self.dir = root / rollout_id
        self.home = self.dir / "home"
        self.work = self.dir / "work"
        self.tmp = self.dir / "tmp"
        self.config_path = self.dir / "opencode.json"
        self.log_path = self.dir / "agent.log"
        self.uid = uid
        self.limits = limits
        self.python = python  # the interpreter of the ``inside`` helpers (the uid must be able to run it)
        self.violation: str | None = None

    def create(self) -> None:
        """Make the empty sandbox, killing what the uid still runs and holds (blocking: run it off
        the loop); raises ``processes.UidNotEmpty`` if the uid cannot be emptied."""
        self.kill_all()  # a previous holder of this uid must be gone
        usage.remove_sysv_objects(self.uid)
        tree.remove(self.dir)
        os.mkdir(self.dir, 0o700)
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in OWNED_DIRS:
                os.mkdir(name, 0o700, dir_fd=fd)
                os.chown(name, self.uid, self.uid, dir_fd=fd, follow_symlinks=False)
            os.fchown(fd, 0, self.uid)
            os.fchmod(fd, 0o710)
        finally:
            os.close(fd)

    def write_private(self, name: str, data: bytes, mode: int) -> Path:
        """Create ``name`` in the root-owned sandbox dir (never following a link), group-owned by the uid."""
        fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            os.fchown(fd, 0, self.uid)
            os.write(fd, data)
        finally:
            os.close(fd)
        return self.dir / name

    def open_log(self):
        """The agent's log, appended to (root-only: held-out results stay out of the uid's reach)."""
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        return os.fdopen(fd, "ab")

    def read_log(self, limit: int = 64_000) -> str:
        """The tail of the agent's log ('' if there is none)."""
        try:
            fd = os.open(self.log_path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return ""
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace")

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """A clean environment rooted in the sandbox's HOME, with its own TMPDIR."""
        home = str(self.home)
        env = {
            "HOME": home,
            "USER": "sandbox",
            "PATH": SANDBOX_PATH,
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.tmp),
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_STATE_HOME": f"{home}/.local/state",
        }
        return {**env, **(extra or {})}

    def _demote(self) -> None:
        # Runs in the child between fork and exec: new session, limits, drop to the uid, then a
        # Landlock domain of its own (no abstract socket or signal reaches outside it).
        os.setsid()
        limits = self.limits
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))
        # Soft limit: SIGXCPU (the process can tell why it died); hard limit a second later: SIGKILL.
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.disk_mb * MB, limits.disk_mb * MB))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # POSIX message queues: memory outside any count
        os.setgroups([])
        os.setgid(self.uid)
        os.setuid(self.uid)
        landlock.restrict_self()

    async def spawn(
        self, argv: list[str], env: dict[str, str], stdout, stderr, stdin=asyncio.subprocess.DEVNULL, cwd=None
    ):
        """Start ``argv`` in the sandbox (own session, limits, the uid; in ``cwd``, default the work
        dir); returns the process."""
        return await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd or self.work,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            preexec_fn=self._demote,
        )

    async def run(
        self,
        command: str,
        timeout_s: float,
        stdin: str = "",
        env: dict[str, str] | None = None,
        argv: list[str] | None = None,
        cwd: str | None = None,
        output_bytes: int = OUTPUT_TAIL_BYTES,
    ) -> CommandOutcome:
        """Run a shell command (``argv``, default ``bash -c command``) to completion in the sandbox;
        kills its process group at the timeout. Keeps the last ``output_bytes`` of each output."""
        started = time.monotonic()
        pipe = asyncio.subprocess.PIPE
        proc = await self.spawn(
            argv or ["bash", "-c", command],
            env or self.env(),
            pipe,
            pipe,
            stdin=pipe if stdin else asyncio.subprocess.DEVNULL,
            cwd=cwd,
        )
        try:
            out, err = await asyncio.wait_for(_communicate(proc, stdin.encode(), output_bytes), timeout_s)
            return CommandOutcome(
                command=command,
                exit_code=proc.returncode,
                stdout=_text(out, output_bytes),
                stderr=_text(err, output_bytes),
                duration_s=time.monotonic() - started,
            )
        except TimeoutError:
            self.kill_group(proc.pid)
            try:  # a process that left the group may still hold the pipes open
                out, err = await asyncio.wait_for(_communicate(proc, b""), 5)
            except TimeoutError:
                out, err = b"", b""
            return CommandOutcome(
                command=command,
                exit_code=None,
                stdout=_text(out),
                stderr=_text(err),
                duration_s=time.monotonic() - started,
                timed_out=True,
            )

    def helper_argv(self, command: str, *args: str) -> list[str]:
        """The command line of one of the ``inside`` helpers (isolated mode: no user site-packages,
        no work-dir module on ``sys.path``)."""
        return [self.python, "-I", "-c", _RUN_INSIDE, command, *args]

    async def _helper(self, command: str, payload: Any) -> bytes:
        """Run an ``inside`` helper as the uid in the work dir with ``payload`` as JSON on stdin; its stdout."""
        pipe = asyncio.subprocess.PIPE
        proc = await self.spawn(self.helper_argv(command), self.env(), pipe, pipe, stdin=pipe)
        try:
            out, err = await asyncio.wait_for(
                _communicate(proc, orjson.dumps(payload), HELPER_OUTPUT_BYTES), HELPER_TIMEOUT_S
            )
        except TimeoutError:
            self.kill_group(proc.pid)
            raise SandboxError(f"sandbox helper timed out after {HELPER_TIMEOUT_S:g}s") from None
        if proc.returncode < 0:
            raise HelperKilled(f"sandbox helper killed by signal {-proc.returncode}")
        if proc.returncode != 0:
            raise SandboxError(f"sandbox helper failed ({proc.returncode}): {_text(err, 600)}")
        return out

    async def add_files(self, files: dict[str, str]) -> None:
        """Place the task's files in the work dir, written by the uid itself."""
        if files:
            await self._helper("place", files)

    async def list_files(
        self,
        max_files: int = 64,
        max_bytes: int = 64 * 1024,
        max_total: int = 1 << 20,
        max_entries: int = 20_000,
        max_skipped: int = 256,
    ) -> tuple[dict[str, str], list[str]]:
        """Text of the work dir's regular files (symlinks skipped, ``.git`` left out), read by the
        uid itself: at most ``max_files`` files of ``max_bytes`` each, ``max_total`` bytes in all,
        after looking at ``max_entries`` names; and the paths of up to ``max_skipped`` files left out.
        A name that is not UTF-8 comes back with its other bytes escaped (``\\xNN``)."""
        bounds = [max_files, max_bytes, max_total, max_entries, max_skipped]
        try:
            listing = await self._helper("list", bounds)
        except HelperKilled:  # a listing that met the rollout's end: read-only, so read again once
            await asyncio.sleep(0.05)
            listing = await self._helper("list", bounds)
        try:
            parsed = orjson.loads(listing)
        except orjson.JSONDecodeError as exc:
            raise SandboxError(f"sandbox helper printed no listing: {exc}") from None
        return parsed["files"], parsed["skipped"]

    @staticmethod
    def kill_group(pgid: int) -> None:
        """SIGKILL one process group (a command and its children)."""
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self) -> None:
        """SIGKILL every process of the uid until none is left; raises ``processes.UidNotEmpty``."""
        processes.kill_uid(self.uid)

    def stop_processes(self) -> None:
        """``kill_all`` for a caller that cannot wait on it failing (the seat is checked again before reuse)."""
        try:
            self.kill_all()
        except processes.UidNotEmpty as exc:
            log.warning("%s", exc)

    async def copy_work_to(self, other: "Sandbox", timeout_s: float = HELPER_TIMEOUT_S) -> None:
        """Copy this sandbox's work dir (directories and regular files; no symbolic links, no
        ``.git``; a file with several names once) into ``other``'s empty one: read by this uid,
        written by the other's, streamed through a pipe. At most ``disk_mb`` of file content by
        apparent size (a sparse file counts in full): ``CopyTooLarge`` past that."""
        read, write = os.pipe()
        bound = str(self.limits.disk_mb * MB)
        try:
            packer = await self.spawn(self.helper_argv("pack", bound), self.env(), write, asyncio.subprocess.PIPE)
            unpacker = await other.spawn(
                other.helper_argv("unpack", bound),
                other.env(),
                asyncio.subprocess.DEVNULL,
                asyncio.subprocess.PIPE,
                stdin=read,
            )
        except OSError as exc:  # no work dir: the rollout ended before its sandbox was made
            raise SandboxError(f"cannot start the copy: {exc}") from None
        finally:
            os.close(read)
            os.close(write)
        try:
            (_, packed), (_, unpacked) = await asyncio.wait_for(
                asyncio.gather(_communicate(packer, b""), _communicate(unpacker, b"")), timeout_s
            )
        except TimeoutError:
            self.kill_group(packer.pid)
            other.kill_group(unpacker.pid)
            raise SandboxError(f"copying the work dir took longer than {timeout_s:g}s") from None
        if COPY_LIMIT_EXIT in (packer.returncode, unpacker.returncode):
            raise CopyTooLarge(_text(packed + unpacked, 600).strip())
        if packer.returncode != 0 or unpacker.returncode != 0:
            raise SandboxError(f"copying the work dir failed: {_text(packed + unpacked, 600)}")

    def disk_bytes(self) -> int:
        """Bytes the uid holds on disk: its sandbox tree and deleted files it keeps open."""
        try:
            fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return 0
        try:
            return usage.disk_bytes(fd, self.uid)
        finally:
            os.close(fd)

    def over_limits(self, memory: bool = True, disk: bool = True) -> str | None:
        """Which limit the uid's ``memory`` or the sandbox's ``disk`` is over, if any (blocking: run
        it off the loop)."""
        try:
            return self._usage_over_limits(memory, disk)
        except usage.HiddenFiles as exc:
            return f"memory and disk cannot be counted: {exc}"
        except tree.TreeLimit as exc:
            return f"work dir limit: {exc}"

    def _usage_over_limits(self, memory: bool, disk: bool) -> str | None:
        if memory and (held := usage.memory_bytes(self.uid) / MB) > self.limits.memory_mb:
            return f"memory limit: {held:.0f} MB (resident, memfd, shared memory) > {self.limits.memory_mb} MB"
        if disk and (used := self.disk_bytes() / MB) > self.limits.disk_mb:
            return f"disk limit: {used:.0f} MB > {self.limits.disk_mb} MB"
        return None

    async def watch(self, interval_s: float = 0.5, disk_every: int = 4) -> str:
        """Return (and kill everything) once memory or disk (every ``disk_every`` checks) passes its
        limit; run as a task."""
        tick = 0
        while True:
            await asyncio.sleep(interval_s)
            self.violation = await asyncio.to_thread(self.over_limits, disk=tick % disk_every == 0)
            tick += 1
            if self.violation:
                await asyncio.to_thread(self.stop_processes)
                return self.violation

    def destroy(self) -> None:
        """Kill every process of the uid, remove its IPC objects and the directory (with the agent's
        log); blocking, so run it off the loop. Raises ``processes.UidNotEmpty`` (the directory is
        then left for a later try) or ``OSError`` (it could not be removed)."""
        self.kill_all()
        usage.remove_sysv_objects(self.uid)
        tree.remove(self.dir)


def clean_stale(root: Path, uids: list[int]) -> int:
    """Make the sandbox root (0711: each uid may pass to its own sandbox, list none) empty: remove
    every sandbox left by an earlier run of the service and what its uids still hold; returns how
    many sandboxes were removed. Raises ``processes.UidNotEmpty`` or ``OSError`` if it cannot."""
    for uid in uids:
        processes.kill_uid(uid)
        usage.remove_sysv_objects(uid)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o711)
    stale = [entry.path for entry in os.scandir(root)]
    for path in stale:
        tree.remove(path)
    return len(stale)


async def _communicate(
    proc: asyncio.subprocess.Process, data: bytes, limit: int = OUTPUT_TAIL_BYTES
) -> tuple[bytes, bytes]:
    """Feed stdin (ignoring a program that exits without reading it) and collect the last ``limit``
    bytes of stdout and of stderr."""

    async def feed() -> None:
        if proc.stdin is None:
            return
        try:
            proc.stdin.write(data)
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            pass

    _, out, err = await asyncio.gather(feed(), _tail(proc.stdout, limit), _tail(proc.stderr, limit))
    await proc.wait()
    return out, err


async def _tail(stream: asyncio.StreamReader | None, limit: int = OUTPUT_TAIL_BYTES) -> bytes:
    """The last ``limit`` bytes of a stream, read to its end (a program may print without bound);
    b"" for an output that is not a pipe of ours."""
    kept = bytearray()
    if stream is None:
        return b""
    while chunk := await stream.read(1 << 16):
        kept += chunk
        if len(kept) > 2 * limit:
            del kept[:-limit]
    return bytes(kept[-limit:])


def _text(data: bytes | None, limit: int = OUTPUT_TAIL_BYTES) -> str:
    return (data or b"")[-limit:].decode(errors="replace")


def close_shared_dirs(
    candidates: tuple[str, ...] = ("/tmp", "/var/tmp", "/run/lock", "/dev/shm", "/dev/mqueue"),
) -> list[str]:
    """Take write permission for others off the shared temp dirs and every world-writable mount
    point (a sandbox uid could park files there, outside its disk limit and beyond its rollout);
    each sandbox has its own TMPDIR instead. Returns the paths changed."""
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[2] not in ("proc", "sysfs", "cgroup", "cgroup2")]
    changed = []
    for path in dict.fromkeys([*candidates, *points]):
        try:
            info = os.stat(path, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~stat.S_IWOTH)
                changed.append(path)
        except OSError:
            continue
    return changed
