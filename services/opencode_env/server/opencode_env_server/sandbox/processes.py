"""A sandbox uid's processes: found thread by thread, killed until ``/proc`` shows none left.

A process cannot hide from these:

- ``tasks_of`` reads every thread (``/proc/<pid>/task/<tid>``), not only the thread-group leader:
  a leader that exits with a raw ``exit`` syscall shows ``Z (zombie)`` in ``/proc/<pid>/status``
  while its other threads run on, holding the process's memory and files;
- ``kill_uid`` signals *as the uid* with ``kill(-1, SIGKILL)``, which the kernel applies to every
  process of the uid in one pass under its task-list lock (no scan a fork can race), and repeats
  (with root's own SIGKILL for each thread group found) until no thread of the uid is left in
  ``/proc``. A seat is handed out again only after that (``UidNotEmpty`` otherwise).
"""

import os
import signal
import subprocess
import time
from dataclasses import dataclass

# Runs as the uid: kill(-1, SIGKILL) reaches every process of the uid (but the caller) in one pass
# under the kernel's task-list lock. Its result says nothing about the uid (it succeeds while any
# process of any uid exists): emptiness is read from /proc afterwards.
_KILL_ALL_AS_UID = ["bash", "--noprofile", "--norc", "-c", "kill -9 -1"]


class UidNotEmpty(RuntimeError):
    """Processes of the uid are still there after the kill's deadline: its seat must not be reused."""


@dataclass(frozen=True)
class Process:
    """A thread group of the uid and the ``/proc`` path of one of its live threads (``None`` when
    every thread has exited and only the zombie waits to be reaped)."""

    pid: int
    live_task: str | None

    def resident_kb(self) -> int:
        """Resident memory of the process (shared by its threads; read from a live one)."""
        if self.live_task is None:
            return 0
        return int(_status(self.live_task).get("VmRSS", "0 kB").split()[0])


def _status(path: str) -> dict[str, str]:
    try:
        with open(f"{path}/status") as status:
            return {k: v.strip() for k, v in (line.split(":", 1) for line in status if ":" in line)}
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
        return {}


def _live_task(pid: str) -> str | None:
    """The ``/proc`` path of a thread of ``pid`` that has not exited, if any."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        path = f"/proc/{pid}/task/{tid}"
        if not _status(path).get("State", "Z").startswith(("Z", "X")):
            return path
    return None


def tasks_of(uid: int) -> list[Process]:
    """Every thread group whose real uid is ``uid``, zombies included (a zombie leader may still
    have running threads: ``live_task`` names one)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _status(f"/proc/{entry.name}")
        if fields and int(fields.get("Uid", "-1").split()[0]) == uid:
            found.append(Process(int(entry.name), _live_task(entry.name)))
    return found


def processes_of(uid: int) -> list[Process]:
    """The uid's processes that still run code (at least one live thread)."""
    return [p for p in tasks_of(uid) if p.live_task is not None]


def _kill_as(uid: int) -> None:
    try:
        subprocess.run(
            _KILL_ALL_AS_UID,
            user=uid,
            group=uid,
            extra_groups=[],
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        pass  # root's own pass below still kills what the scan finds


def kill_uid(uid: int, timeout_s: float = 5.0) -> None:
    """SIGKILL every process of ``uid`` until ``/proc`` shows none of its threads (zombies waiting
    to be reaped included); raises ``UidNotEmpty`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while left := tasks_of(uid):
        if time.monotonic() > deadline:
            raise UidNotEmpty(f"uid {uid} still has processes {[p.pid for p in left][:10]} after {timeout_s:g}s")
        _kill_as(uid)
        for process in left:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)
