"""Helpers the service runs *as a sandbox's uid* (``main(CMD)``, through ``Sandbox.helper_argv``),
so that the kernel's permission checks apply to every file they touch; the root service never opens
a path inside a sandbox by name.

- ``place``: stdin ``{relative path: text}``; writes the task's files into the current directory.
- ``list``: stdin ``[max_files, max_bytes, max_total, max_entries, max_skipped]``; stdout
  ``{"files": {path: text}, "skipped": [path]}``: small regular files, links not followed, ``.git``
  left out. Every name comes back: a name that is not UTF-8 is escaped (``\\xNN``).
- ``pack MAX_BYTES``: stdout, the current directory's directories and regular files (symbolic
  links, devices and ``.git`` left out) as a stream ``unpack`` reads: one JSON header line per
  entry, then its bytes, streamed in chunks. A file with several names is sent once, its other
  names as links to the first. At most ``MAX_BYTES`` of file content, counted by apparent size (a
  sparse file counts in full): past that it exits with ``COPY_LIMIT_EXIT``.
- ``unpack MAX_BYTES``: stdin, such a stream; recreates it in the (empty) current directory,
  writing at most ``MAX_BYTES`` (``COPY_LIMIT_EXIT`` past that).

Standard library only, run with ``-I`` (no user site-packages, no current directory on ``sys.path``).
"""

import json
import os
import stat
import sys
from pathlib import PurePosixPath

from opencode_env_server.sandbox.tree import TreeLimit, walk

LIST_MAX_DEPTH = 64
CHUNK_BYTES = 1 << 20
COPY_LIMIT_EXIT = 3  # pack or unpack stopped at its byte bound


class CopyLimit(RuntimeError):
    """The work dir holds more bytes (apparent size) than the copy may carry."""


def shown(path: str) -> str:
    """A path as text: itself if its bytes are UTF-8, else with the other bytes as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def _no_git(path: str) -> bool:
    return path == ".git" or path.endswith("/.git")


def _open_regular(entry):
    """The regular file ``entry`` names, opened for reading; None if it is gone or no longer a
    regular file (a name the walk saw as a file may be a directory or a link by now)."""
    try:
        fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=entry.dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def _read(entry, limit: int):
    """Up to ``limit`` bytes of the regular file ``entry`` names; None if it is not one (any more)."""
    f = _open_regular(entry)
    if f is None:
        return None
    with f:
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


def pack(out, max_bytes: int) -> None:
    total = 0
    first_name: dict[tuple[int, int], str] = {}  # (device, inode) of a file with several names: its first
    root = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for entry in walk(root, prune=_no_git):
            mode = stat.S_IMODE(entry.info.st_mode) & 0o755
            if entry.is_dir and not _no_git(entry.path):
                out.write(json.dumps({"path": entry.path, "dir": True, "mode": mode | 0o700}).encode() + b"\n")
                continue
            if not stat.S_ISREG(entry.info.st_mode):
                continue
            inode = (entry.info.st_dev, entry.info.st_ino)
            if entry.info.st_nlink > 1 and inode in first_name:
                out.write(json.dumps({"path": entry.path, "dir": False, "link": first_name[inode]}).encode() + b"\n")
                continue
            f = _open_regular(entry)
            if f is None:
                continue
            with f:
                size = os.fstat(f.fileno()).st_size
                if total + size > max_bytes:
                    raise CopyLimit(f"the work dir holds more than {max_bytes >> 20} MB of files (apparent size)")
                total += size
                if entry.info.st_nlink > 1:
                    first_name[inode] = entry.path
                out.write(json.dumps({"path": entry.path, "dir": False, "mode": mode | 0o600, "size": size}).encode())
                out.write(b"\n")
                left = size
                while left:  # exactly ``size`` bytes, whatever the file does meanwhile
                    chunk = f.read(min(left, CHUNK_BYTES))
                    if not chunk:
                        chunk = bytes(min(left, CHUNK_BYTES))
                    out.write(chunk)
                    left -= len(chunk)
    finally:
        os.close(root)


def _checked(path: str) -> str:
    parts = PurePosixPath(path).parts
    if (
        not parts
        or path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or str(PurePosixPath(path)) != path
    ):
        raise ValueError(f"bad path in the stream: {path!r}")
    return path


def unpack(stream, max_bytes: int) -> None:
    total = 0
    written: set[str] = set()
    while header := stream.readline():
        entry = json.loads(header)
        path = _checked(entry["path"])
        if entry["dir"]:
            os.mkdir(path, entry["mode"])
            continue
        if "link" in entry:
            if entry["link"] not in written:
                raise ValueError(f"link to a file not in the stream: {entry['link']!r}")
            os.link(entry["link"], path, follow_symlinks=False)
            continue
        total += entry["size"]
        if total > max_bytes:
            raise CopyLimit(f"the stream carries more than {max_bytes >> 20} MB of files")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, entry["mode"])
        with os.fdopen(fd, "wb") as f:
            left = entry["size"]
            while left:
                chunk = stream.read(min(left, CHUNK_BYTES))
                if not chunk:
                    raise ValueError(f"the stream ended inside {path!r}")
                f.write(chunk)
                left -= len(chunk)
        written.add(path)


def main(command: str, *args: str) -> None:
    try:
        _run(command, *args)
    except CopyLimit as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(COPY_LIMIT_EXIT) from None


def _run(command: str, *args: str) -> None:
    if command == "place":
        place(json.load(sys.stdin))
    elif command == "list":
        json.dump(listing(*json.load(sys.stdin)), sys.stdout)
    elif command == "pack":
        pack(sys.stdout.buffer, int(args[0]))
    elif command == "unpack":
        unpack(sys.stdin.buffer, int(args[0]))
    else:
        raise SystemExit(f"unknown command {command!r}")
