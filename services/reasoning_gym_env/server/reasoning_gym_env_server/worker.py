"""The code a dataset worker process runs: build datasets, generate entries, score answers.

Everything that runs reasoning-gym code with client-chosen inputs runs here, in a process the
server kills when a call overruns its deadline, with its address space capped (``RLIMIT_AS``) so an
oversized build fails with ``MemoryError`` instead of growing the server. Requests and replies are
pickled tuples, each framed by an 8-byte length, over a socket to the server (``pool.py``).
"""

import pickle
import resource
import signal
import socket
import struct
import time
from collections import OrderedDict
from typing import Any, BinaryIO

import reasoning_gym
from reasoning_gym.composite import DatasetSpec
from reasoning_gym.dataset import ProceduralDataset

from .spec import DatasetRequest

FRAME = struct.Struct("!Q")
# Datasets a worker keeps built (least recently used evicted): a session's later questions and
# scoring usually reuse the one its reset built.
CACHED_DATASETS = 8
# A batch of entries stops growing after this long (it always holds at least one entry).
BATCH_TIME_S = 0.05
# The exceptions reasoning-gym raises for a config it rejects (its dataclasses' validate()).
CONFIG_ERRORS = (TypeError, ValueError, AssertionError, KeyError)


def send_frame(sock: socket.socket, payload: Any) -> None:
    """Pickle ``payload`` and send it with its length prefix."""
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(FRAME.pack(len(data)) + data)


def _read_exactly(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("server closed the worker socket")
    return data


def recv_frame(stream: BinaryIO) -> Any:
    """Read one length-prefixed pickled payload from the socket's buffered reader."""
    (size,) = FRAME.unpack(_read_exactly(stream, FRAME.size))
    return pickle.loads(_read_exactly(stream, size))


class ConfigRejected(Exception):
    """reasoning-gym rejected the dataset's config."""


class EntryTooLarge(Exception):
    """A generated entry is over the size limit."""


class DatasetCache:
    """Built datasets by ``DatasetRequest.wire``, least recently used evicted."""

    def __init__(self, capacity: int = CACHED_DATASETS) -> None:
        self._capacity = capacity
        self._datasets: OrderedDict[bytes, ProceduralDataset] = OrderedDict()

    def get(self, wire: bytes) -> ProceduralDataset:
        """The dataset of a pickled ``DatasetRequest``, built on first use; raises ``ConfigRejected``
        for a config reasoning-gym rejects."""
        dataset = self._datasets.get(wire)
        if dataset is None:
            dataset = build(pickle.loads(wire))
            self._datasets[wire] = dataset
            while len(self._datasets) > self._capacity:
                self._datasets.popitem(last=False)
        self._datasets.move_to_end(wire)
        return dataset


def build(request: DatasetRequest) -> ProceduralDataset:
    """``reasoning_gym.create_dataset`` for ``request``, as upstream's server calls it."""
    if request.specs:
        kwargs: dict[str, Any] = {
            "datasets": [DatasetSpec(name, weight, config) for name, weight, config in request.specs]
        }
    else:
        kwargs = dict(request.config)
    try:
        return reasoning_gym.create_dataset(request.name, seed=request.seed, size=request.size, **kwargs)
    except CONFIG_ERRORS as exc:
        raise ConfigRejected(f"Invalid dataset_config for '{request.name}': {str(exc) or type(exc).__name__}") from exc


def entries(cache: DatasetCache, wire: bytes, start: int, count: int, max_bytes: int) -> list[bytes]:
    """Pickled entries ``start, start + 1, ...`` (wrapping), as many of ``count`` as fit the time
    and byte budget; at least one, unless that one alone is over ``max_bytes`` (``EntryTooLarge``)."""
    dataset = cache.get(wire)
    size = len(dataset)
    began, total, batch = time.monotonic(), 0, []
    for offset in range(count):
        blob = pickle.dumps(dataset[(start + offset) % size], protocol=pickle.HIGHEST_PROTOCOL)
        if len(blob) > max_bytes:
            if not batch:
                raise EntryTooLarge(
                    f"question {(start + offset) % size} takes {len(blob)} bytes, over MAX_MESSAGE_BYTES={max_bytes}"
                )
            break
        batch.append(blob)
        total += len(blob)
        if total >= max_bytes or time.monotonic() - began > BATCH_TIME_S:
            break
    return batch


def score(cache: DatasetCache, wire: bytes, entry: bytes, answer: str) -> float:
    """The dataset's own ``score_answer`` for ``answer`` against the pickled ``entry``."""
    return float(cache.get(wire).score_answer(answer=answer, entry=pickle.loads(entry)))


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def serve(sock: socket.socket, memory_mb: int) -> None:
    """Worker main loop: answer requests until the server closes the socket.

    Replies are ``("ok", value)``, ``("invalid", message)`` for a config reasoning-gym rejects,
    ``("too_large", message)``, ``("memory", message)`` (then the worker exits: its heap is
    suspect) or ``("error", message)`` for any other exception of reasoning-gym's.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    limit = _address_space_bytes() + memory_mb * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cache = DatasetCache()
    stream = sock.makefile("rb")
    handlers = {"entries": lambda *args: entries(cache, *args), "score": lambda *args: score(cache, *args)}
    while True:
        try:
            kind, *args = recv_frame(stream)
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = ("ok", handlers[kind](*args))
        except ConfigRejected as exc:
            reply = ("invalid", str(exc))
        except EntryTooLarge as exc:
            reply = ("too_large", str(exc))
        except MemoryError:
            send_frame(sock, ("memory", f"ran out of its DATASET_BUILD_MEMORY_MB={memory_mb} memory bound"))
            return
        except Exception as exc:  # a reasoning-gym bug on this input: reported, the worker lives on
            reply = ("error", f"{type(exc).__name__}: {exc}"[:2000])
        send_frame(sock, reply)
