"""A cache of folders a job makes deterministically (the CPU policy's pre-training), keyed by
everything the folder depends on, so that a later run with fresh volumes copies instead of
recomputing. Best effort: a cache that cannot be read or written is skipped with a log line."""

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def cache_key(inputs: dict[str, Any]) -> str:
    """A short digest of ``inputs`` (JSON-serialisable: settings, package versions, ...)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:24]


def restore(cache_dir: Path, key: str, destination: Path, marker: str) -> bool:
    """Copy the cached folder ``key`` (complete when it holds ``marker``) to ``destination``."""
    source = cache_dir / key
    if not (source / marker).is_file():
        return False
    try:
        shutil.copytree(source, destination, dirs_exist_ok=True)
    except OSError as exc:
        log.warning("cache: cannot copy %s: %s", source, exc)
        return False
    return True


def store(cache_dir: Path, key: str, source: Path) -> None:
    """Keep a copy of ``source`` as ``key``: written aside, then renamed, so a reader never sees half."""
    partial = cache_dir / f".{key}.{os.getpid()}"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, partial, dirs_exist_ok=True)
        partial.rename(cache_dir / key)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        log.warning("cache: not kept in %s (%s); the next run with fresh volumes computes it again", cache_dir, exc)
