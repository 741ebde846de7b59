"""Walking and removing directory trees a sandbox controls, without recursion and within bounds.

Python's own walks (``os.fwalk``, ``shutil.rmtree``) recurse once per level: a sandbox that makes a
tree a few thousand levels deep turns them into ``RecursionError``. ``walk`` keeps an explicit stack
of directory fds (one per level, none followed through a link) and stops with ``TreeLimit`` past
``MAX_DEPTH`` levels or ``MAX_ENTRIES`` names; ``remove`` hands removal to coreutils' ``rm``, whose
fts walk has no depth limit, never follows links and stays on one file system.
Imported by the helpers that run as a sandbox's uid (``inside``): standard library only.
"""

import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MAX_DEPTH = 256
MAX_ENTRIES = 1_000_000
REMOVE_TIMEOUT_S = 600.0


class TreeLimit(RuntimeError):
    """The tree is deeper than the walk's depth bound, or has more names than its entry bound."""


@dataclass(frozen=True)
class Entry:
    """One name met by ``walk``: its directory's fd (valid until the walk moves on), its path
    relative to the root, and its ``lstat``."""

    dir_fd: int
    path: str
    name: str
    info: os.stat_result

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.info.st_mode)


def walk(
    root_fd: int,
    max_depth: int = MAX_DEPTH,
    max_entries: int = MAX_ENTRIES,
    prune: Callable[[str], bool] | None = None,
) -> Iterator[Entry]:
    """Every name under the directory ``root_fd``, a directory's entries before its subdirectories'
    (depth first, names sorted); links are reported, never followed. Directories whose path
    ``prune`` accepts are reported but not entered. Raises ``TreeLimit`` past the bounds."""
    counted = 0
    stack: list[tuple[int, str, Iterator[str]]] = []

    def enter(fd: int, path: str) -> list[Entry]:
        nonlocal counted
        entries, subdirs = [], []
        try:
            with os.scandir(fd) as listing:
                for item in listing:
                    counted += 1
                    if counted > max_entries:
                        raise TreeLimit(f"more than {max_entries} files and directories")
                    try:
                        info = item.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    rel = f"{path}/{item.name}" if path else item.name
                    entries.append(Entry(fd, rel, item.name, info))
                    if stat.S_ISDIR(info.st_mode) and not (prune and prune(rel)):
                        subdirs.append(item.name)
        except BaseException:
            os.close(fd)
            raise
        entries.sort(key=lambda e: e.name)
        stack.append((fd, path, iter(sorted(subdirs))))
        return entries

    try:
        yield from enter(os.dup(root_fd), "")
        while stack:
            fd, path, subdirs = stack[-1]
            name = next(subdirs, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            if len(stack) > max_depth:
                raise TreeLimit(f"directories nested deeper than {max_depth} levels")
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:  # swapped for a link or removed meanwhile: not followed
                continue
            yield from enter(child, f"{path}/{name}" if path else name)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def remove(path: os.PathLike | str, timeout_s: float = REMOVE_TIMEOUT_S) -> None:
    """Remove ``path`` and everything under it, however deep (no error if it is gone); raises
    ``OSError`` if it could not. Call it only once no process can change the tree any more."""
    try:
        done = subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", os.fspath(path)],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise OSError(f"removing {path} took longer than {timeout_s:g}s") from None
    if done.returncode != 0:
        raise OSError(f"removing {path} failed: {done.stderr.decode(errors='replace')[-300:]}")
