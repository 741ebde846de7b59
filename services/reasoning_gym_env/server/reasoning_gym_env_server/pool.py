"""Worker processes that run all reasoning-gym code, each call under a deadline.

The event loop never runs dataset code: building a dataset, generating its questions and scoring an
answer can each take unbounded time and memory for some inputs (a ``dataset_config`` with huge
numbers, an answer like ``9**9**9**9`` to a sympy-scored dataset). Each call goes to an idle worker
(``worker.py``, forked from a forkserver that has reasoning-gym imported); a worker past
``DATASET_BUILD_TIMEOUT_S`` is killed and replaced, and a worker's address space is capped at its
start-up size plus ``DATASET_BUILD_MEMORY_MB``.
"""

import asyncio
import logging
import multiprocessing
import pickle
import socket
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

from . import worker as worker_module
from .errors import DatasetError, DatasetTooCostly, EnvInputError
from .ratelimit import RateLimitedLog
from .spec import DatasetRequest
from .worker import FRAME

log = logging.getLogger("reasoning_gym_env_server.pool")
RESPAWN_RETRY_S = 1.0


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def kill(self) -> None:
        self.writer.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=1)


class WorkerPool:
    """``size`` worker processes; ``entries`` and ``score`` run on whichever is idle."""

    def __init__(
        self, size: int, timeout_s: float, memory_mb: int, max_entry_bytes: int, warnings: RateLimitedLog
    ) -> None:
        self.size = size
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_entry_bytes = max_entry_bytes
        self.restarts = 0
        self._warnings = warnings
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([worker_module.__name__])
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._busy: set[_Worker] = set()
        self._respawns: set[asyncio.Task] = set()
        self._exchanges: set[asyncio.Task] = set()
        self._closed = False

    async def start(self) -> None:
        """Start the workers (the first start also starts the forkserver, which imports reasoning-gym)."""
        for new in await asyncio.gather(*(self._spawn() for _ in range(self.size))):
            self._idle.put_nowait(new)

    async def close(self) -> None:
        """Kill every worker."""
        self._closed = True
        for task in self._respawns | self._exchanges:
            task.cancel()
        while not self._idle.empty():
            self._idle.get_nowait().kill()
        for busy in list(self._busy):
            busy.kill()

    async def entries(self, request: DatasetRequest, start: int, count: int) -> list[bytes]:
        """Pickled entries from index ``start`` on (wrapping), at least one, at most ``count``."""
        what = f"building '{request.name}' and generating question {start}"
        return await self._call(("entries", request.wire, start, count, self.max_entry_bytes), what)

    async def score(self, request: DatasetRequest, entry: bytes, answer: str) -> float:
        """The dataset's ``score_answer(answer, entry)`` for a pickled ``entry``."""
        return await self._call(("score", request.wire, entry, answer), f"scoring an answer for '{request.name}'")

    async def _spawn(self) -> _Worker:
        parent, child = socket.socketpair()
        process = self._context.Process(
            target=worker_module.serve, args=(child, self.memory_mb), name="dataset-worker", daemon=True
        )
        try:
            await asyncio.to_thread(process.start)
        finally:
            child.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent)
        return _Worker(process, reader, writer)

    def _replace(self, dead: _Worker) -> None:
        dead.kill()
        self.restarts += 1
        if not self._closed:
            task = asyncio.create_task(self._respawn())
            self._respawns.add(task)
            task.add_done_callback(self._respawns.discard)

    async def _respawn(self) -> None:
        while True:
            try:
                self._idle.put_nowait(await self._spawn())
                return
            except OSError:
                log.exception("could not start a dataset worker; retrying in %gs", RESPAWN_RETRY_S)
                await asyncio.sleep(RESPAWN_RETRY_S)

    async def _call(self, request: tuple, what: str) -> Any:
        worker = await self._idle.get()
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        exchange = asyncio.create_task(self._exchange(worker, data, what))
        self._exchanges.add(exchange)
        exchange.add_done_callback(self._exchanges.discard)
        exchange.add_done_callback(_settle_exchange)
        kind, value = await asyncio.shield(exchange)
        if kind == "ok":
            return value
        if kind == "invalid":
            raise EnvInputError(value)
        if kind in ("too_large", "memory"):
            self._warnings.warning("dataset worker refused %s: %s", what, value)
            raise DatasetTooCostly(f"{what}: {value}")
        self._warnings.warning("reasoning-gym failed while %s: %s", what, value)
        raise DatasetError(f"reasoning-gym failed while {what}: {value}")

    async def _exchange(self, worker: _Worker, data: bytes, what: str) -> tuple[str, Any]:
        """Send one request to ``worker`` and read its reply under the deadline; then the worker goes
        back to idle, or is replaced when it overran or died. A task of its own, so that a caller
        cancelled mid-call (a session closed during a prefetch) leaves the reply to be read here
        instead of costing a worker."""
        self._busy.add(worker)
        healthy = False
        try:
            async with asyncio.timeout(self.timeout_s):
                worker.writer.write(FRAME.pack(len(data)) + data)
                await worker.writer.drain()
                kind, value = await _read_frame(worker.reader)
            healthy = kind != "memory"  # the worker exits after a MemoryError
            return kind, value
        except TimeoutError:
            self._warnings.warning("dataset worker killed: %s took over %gs", what, self.timeout_s)
            raise DatasetTooCostly(f"{what} took longer than DATASET_BUILD_TIMEOUT_S={self.timeout_s:g}s") from None
        except (EOFError, OSError, asyncio.IncompleteReadError) as exc:
            self._warnings.warning("dataset worker died while %s: %r", what, exc)
            raise DatasetTooCostly(f"{what} crashed its worker process (it may have run out of memory)") from None
        finally:
            self._busy.discard(worker)
            if healthy:
                self._idle.put_nowait(worker)
            else:  # overran, died, or the pool closed mid-call
                self._replace(worker)


def _settle_exchange(task: asyncio.Task) -> None:
    """Retrieve the outcome of an exchange whose caller may be gone (no "never retrieved" noise)."""
    if not task.cancelled():
        task.exception()


async def _read_frame(reader: asyncio.StreamReader) -> tuple[str, Any]:
    (size,) = FRAME.unpack(await reader.readexactly(FRAME.size))
    return pickle.loads(await reader.readexactly(size))
