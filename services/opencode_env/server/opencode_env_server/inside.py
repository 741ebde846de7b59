"""Helpers the service runs *as a sandbox's uid* (``main(CMD)``, through ``Sandbox.helper_argv``),
so that the kernel's permission checks apply to every file they touch; the root service never opens
a path inside a sandbox by name.

- ``place``: stdin ``{relative path: text}``; writes the task's files into the current directory.
- ``list``: stdin ``[max_files, max_bytes, max_total, max_entries, max_skipped]``; stdout
  ``{"files": {path: text}, "skipped": [path]}``: small regular files, links not followed, ``.git``
  left out. Every name comes back: a name that is not UTF-8 is escaped (``\\xNN``).
- ``pack``: stdout, the current directory's directories and regular files (links, devices and
  ``.git`` left out) as a stream ``unpack`` reads: one JSON header line per entry, then its bytes.
- ``unpack``: stdin, such a stream; recreates it in the (empty) current directory.

Standard library only, run with ``-I`` (no user site-packages, no current directory on ``sys.path``).
"""

import json
import os
import stat
import sys
from pathlib import PurePosixPath

from opencode_env_server.tree import TreeLimit, walk

LIST_MAX_DEPTH = 64
PACK_MAX_BYTES = 1 << 30


def shown(path: str) -> str:
    """A path as text: itself if its bytes are UTF-8, else with the other bytes as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def _no_git(path: str) -> bool:
    return path == ".git" or path.endswith("/.git")


def _read(entry, limit: int):
    """Up to ``limit`` bytes of the regular file ``entry`` names; None if it is gone or no longer a
    regular file (a name the walk saw as a file may be a directory or a link by now)."""
    try:
        fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=entry.dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)[:limit]


def place(files: dict[str, str]) -> None:
    for name, text in files.items():
        parent = os.path.dirname(name)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)


def listing(max_files: int, max_bytes: int, max_total: int, max_entries: int, max_skipped: int) -> dict:
    files, skipped, total = {}, [], 0

    def skip(path: str) -> None:
        if len(skipped) < max_skipped:
            skipped.append(path)

    root = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for entry in walk(root, max_depth=LIST_MAX_DEPTH, max_entries=max_entries, prune=_no_git):
            if not stat.S_ISREG(entry.info.st_mode) or _no_git(entry.path):
                continue
            path = shown(entry.path)
            if len(files) >= max_files or entry.info.st_size > max_bytes or total + entry.info.st_size > max_total:
                skip(path)
                continue
            data = _read(entry, max_bytes)
            if data is None:
                continue
            total += len(data)
            files[path] = data.decode(errors="replace")
    except TreeLimit as exc:
        skip(f"(listing stopped: {exc})")
    finally:
        os.close(root)
    return {"files": files, "skipped": skipped}


def pack(out) -> None:
    total = 0
    root = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for entry in walk(root, prune=_no_git):
            mode = stat.S_IMODE(entry.info.st_mode) & 0o755
            if entry.is_dir and not _no_git(entry.path):
                header, data = {"path": entry.path, "dir": True, "mode": mode | 0o700}, b""
            elif stat.S_ISREG(entry.info.st_mode):
                data = _read(entry, PACK_MAX_BYTES - total + 1)
                if data is None:
                    continue
                total += len(data)
                if total > PACK_MAX_BYTES:
                    raise TreeLimit(f"more than {PACK_MAX_BYTES} bytes of files")
                header = {"path": entry.path, "dir": False, "mode": mode | 0o600, "size": len(data)}
            else:
                continue
            out.write(json.dumps(header).encode() + b"\n" + data)
    finally:
        os.close(root)


def unpack(stream) -> None:
    while header := stream.readline():
        entry = json.loads(header)
        path = entry["path"]
        parts = PurePosixPath(path).parts
        if (
            not parts
            or path.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
            or str(PurePosixPath(path)) != path
        ):
            raise ValueError(f"bad path in the stream: {path!r}")
        if entry["dir"]:
            os.mkdir(path, entry["mode"])
            continue
        data = stream.read(entry["size"])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, entry["mode"])
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def main(command: str) -> None:
    if command == "place":
        place(json.load(sys.stdin))
    elif command == "list":
        json.dump(listing(*json.load(sys.stdin)), sys.stdout)
    elif command == "pack":
        pack(sys.stdout.buffer)
    elif command == "unpack":
        unpack(sys.stdin.buffer)
    else:
        raise SystemExit(f"unknown command {command!r}")
