"""What a sandbox uid holds: memory (resident, memfd, System V IPC) and disk.

Read by the root service without following anything the uid controls: ``/proc`` entries (thread by
thread: see ``processes``), the kernel's System V IPC tables, and the sandbox tree walked by
directory fds without recursion (``tree.walk``, bounded in depth and entries).
A process's open files (``/proc/<pid>/fd``) are readable only with ``CAP_SYS_PTRACE`` or the
process's own uid: ``as_uid`` lends the calling thread the uid's file-system identity for that.
"""

import contextlib
import ctypes
import os
import stat
import subprocess
import time
from collections.abc import Iterator

from . import tree
from .processes import Process, processes_of

_libc = ctypes.CDLL(None, use_errno=True)

# /proc/sysvipc/<kind>: (the column of the owner uid, of the creator uid, of the bytes held)
SYSV_TABLES = {"shm": (7, 9, 14), "msg": (7, 9, 3), "sem": (4, 6, None)}


@contextlib.contextmanager
def as_uid(uid: int) -> Iterator[None]:
    """Run the block with the calling thread's file-system uid and gid set to ``uid`` (the kernel's
    checks for ``/proc/<pid>/fd`` and the uid's files then pass as for the uid itself); only this
    thread changes (``setfsuid`` is per thread), and root's identity is restored after."""
    _libc.setfsgid(uid)
    _libc.setfsuid(uid)
    try:
        yield
    finally:
        _libc.setfsuid(0)
        _libc.setfsgid(0)


class HiddenFiles(RuntimeError):
    """A process of the uid made its open files unreadable (``PR_SET_DUMPABLE`` 0): what it holds cannot be counted."""


# The kernel makes a process non-dumpable when it changes uid, until it execs: a command the root
# service starts in a sandbox (a setup or verify command, a file helper) is unreadable for that moment.
# Only a process still unreadable after this grace is hiding its files. The grace is one budget per
# scan, not per process: many processes that each blink unreadable cannot stretch one scan.
HIDDEN_GRACE_S = 1.0


def _fd_names(task: str, deadline: float) -> list[str]:
    """Names in ``<task>/fd`` ([] for a process gone); raises ``HiddenFiles`` for a live process
    whose table is still closed to the caller at ``deadline`` (``time.monotonic()``)."""
    while True:
        try:
            return os.listdir(f"{task}/fd")
        except PermissionError:
            if time.monotonic() >= deadline:
                raise HiddenFiles(f"process {task} hides its open files (not dumpable)") from None
            time.sleep(0.01)
        except OSError:
            return []


def _open_files(processes: list[Process], grace_s: float = HIDDEN_GRACE_S) -> Iterator[tuple[str, os.stat_result]]:
    """(link target, stat) of each distinct memfd or deleted file the processes hold open, read
    through a live thread of each (call it ``as_uid`` of the processes); raises ``HiddenFiles`` for a
    live process whose table stays closed to it past the scan's ``grace_s``."""
    seen = set()
    deadline = time.monotonic() + grace_s
    for task in (p.live_task for p in processes if p.live_task is not None):
        for fd in _fd_names(task, deadline):
            try:
                target = os.readlink(f"{task}/fd/{fd}")
                if not (target.startswith("/memfd:") or target.endswith(" (deleted)")):
                    continue
                info = os.stat(f"{task}/fd/{fd}")
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                yield target, info


def sysv_objects(uid: int) -> Iterator[tuple[str, int, int]]:
    """(kind, id, bytes held) of every System V shared memory segment, message queue and semaphore
    set owned or created by ``uid``; they outlive the processes that made them."""
    for kind, (owner, creator, size) in SYSV_TABLES.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                rows = [line.split() for line in table.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if uid in (int(row[owner]), int(row[creator])):
                yield kind, int(row[1]), int(row[size]) if size is not None else 0


def memory_bytes(uid: int) -> int:
    """Resident memory of the uid's processes, plus the memfds they hold and its System V objects
    (memory no process maps is in no resident set)."""
    procs = processes_of(uid)
    resident = sum(p.resident_kb() for p in procs) * 1024
    with as_uid(uid):
        memfds = sum(info.st_blocks * 512 for target, info in _open_files(procs) if target.startswith("/memfd:"))
    return resident + memfds + sum(size for _, _, size in sysv_objects(uid))


def disk_bytes(root_fd: int, uid: int) -> int:
    """Blocks allocated under the directory ``root_fd`` (each inode once, symlinks not followed),
    plus deleted files the uid's processes still hold open. Raises ``tree.TreeLimit`` for a tree
    past the walk's bounds (a limit violation of its own)."""
    total, seen = 0, set()
    for entry in tree.walk(root_fd):
        info = entry.info
        if (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
    with as_uid(uid):
        deleted = sum(
            info.st_blocks * 512 for target, info in _open_files(processes_of(uid)) if target.endswith(" (deleted)")
        )
    return total + deleted


def remove_sysv_objects(uid: int) -> int:
    """Remove the uid's System V IPC objects (as the uid: only an owner, creator or CAP_SYS_ADMIN
    may); returns how many there were."""
    flags = {"shm": "-m", "msg": "-q", "sem": "-s"}
    found = list(sysv_objects(uid))
    if found:
        subprocess.run(
            ["ipcrm", *[arg for kind, ident, _ in found for arg in (flags[kind], str(ident))]],
            user=uid,
            group=uid,
            extra_groups=[],
            capture_output=True,
            timeout=30,
        )
    return len(found)


def listeners(port: int) -> list[tuple[int, int]]:
    """(owner uid, socket inode) of every TCP socket listening on ``port`` (any address, IPv4 or 6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if row[3] == "0A" and int(row[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.append((int(row[7]), int(row[9])))
    return found


def socket_inodes_of_group(pgid: int, uid: int) -> set[int]:
    """Inodes of the sockets held by the processes of process group ``pgid`` (run by ``uid``)."""
    with as_uid(uid):
        return _socket_inodes(pgid)


def _socket_inodes(pgid: int) -> set[int]:
    inodes = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # after the command name: state, ppid, pgrp
                continue
            for fd in os.listdir(f"/proc/{entry.name}/fd"):
                target = os.readlink(f"/proc/{entry.name}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
        except (OSError, ValueError, IndexError):
            continue
    return inodes
