"""Load benchmark of the reasoning-gym env server.

Runs the same episode loop (bare reset + step with an answer) three ways and prints them side by
side: in-process against reasoning-gym (the library's own cost), over WebSocket against OpenEnv's
stock app, and over WebSocket against our server. Each server runs in its own uvicorn process on
loopback; the load generator is one asyncio process with N concurrent sessions.

    python bench/env_server_load.py --sessions 32 --seconds 10 [--dataset leg_counting] [--repeat 3]
        [--baseline REV ...]   # our server as of a git revision, side by side
"""

import argparse
import asyncio
import base64
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import orjson

DATASET = {"dataset_name": "chain_sum", "seed": 7, "size": 1000}
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    """Throughput and per-episode latency of one run."""

    episodes: int
    seconds: float
    latencies_ms: list[float]

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.seconds

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        return (
            statistics.quantiles(self.latencies_ms, n=1000)[int(q * 10) - 1]
            if len(self.latencies_ms) > 1
            else self.latencies_ms[0]
        )


def run_library(seconds: float) -> Result:
    """The same work with no server: generate the next item and score an answer."""
    import reasoning_gym

    dataset = reasoning_gym.create_dataset(DATASET["dataset_name"], seed=DATASET["seed"], size=DATASET["size"])
    latencies, count, start = [], 0, time.perf_counter()
    deadline = start + seconds
    while (now := time.perf_counter()) < deadline:
        entry = dataset[count % len(dataset)]
        dataset.score_answer(answer="42", entry=entry)
        latencies.append((time.perf_counter() - now) * 1000)
        count += 1
    return Result(count, time.perf_counter() - start, latencies)


class FrameClient:
    """A minimal WebSocket client: the load generator shares the cores with the server it measures,
    so it does as little per message as the protocol allows. Frames go out masked with a zero key
    (valid, and the payload needs no XOR); replies are read as unfragmented text frames, which is
    what both servers send."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, url: str) -> "FrameClient":
        parsed = urllib.parse.urlsplit(url)
        reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port or 80)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET {parsed.path} HTTP/1.1\r\nHost: {parsed.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"WebSocket upgrade refused: {head[:200]!r}")
        return cls(reader, writer)

    @staticmethod
    def frame(message: dict) -> bytes:
        """A client text frame carrying ``message`` as JSON."""
        payload = orjson.dumps(message)
        size = len(payload)
        if size < 126:
            header = bytes([0x81, 0x80 | size])
        elif size < 1 << 16:
            header = bytes([0x81, 0xFE]) + struct.pack("!H", size)
        else:
            header = bytes([0x81, 0xFF]) + struct.pack("!Q", size)
        return header + b"\0\0\0\0" + payload

    async def call(self, frame: bytes) -> bytes:
        """Send a prepared frame and return the payload of the next data frame (answering pings)."""
        self.writer.write(frame)
        while True:
            first, second = await self.reader.readexactly(2)
            size = second & 0x7F
            if size == 126:
                (size,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif size == 127:
                (size,) = struct.unpack("!Q", await self.reader.readexactly(8))
            payload = await self.reader.readexactly(size)
            opcode = first & 0x0F
            if opcode == 0x9:  # ping: pong with the same payload (short: pings carry at most 125 bytes)
                self.writer.write(bytes([0x8A, 0x80 | size]) + b"\0\0\0\0" + payload)
            elif opcode == 0x8:
                raise RuntimeError(f"server closed the session: {payload[2:]!r}")
            else:
                return payload

    def close(self) -> None:
        self.writer.write(self.frame({"type": "close"}))
        self.writer.close()


async def _session(url: str, deadline: float, latencies: list[float]) -> int:
    episodes = 0
    client = await FrameClient.connect(url)
    await client.call(FrameClient.frame({"type": "reset", "data": DATASET}))
    await client.call(FrameClient.frame({"type": "step", "data": {"answer": "42"}}))
    reset = FrameClient.frame({"type": "reset", "data": {}})
    step = FrameClient.frame({"type": "step", "data": {"answer": "42"}})
    while (begin := time.perf_counter()) < deadline:
        await client.call(reset)
        reply = orjson.loads(await client.call(step))
        if reply["type"] != "observation":
            raise RuntimeError(f"server error: {reply}")
        latencies.append((time.perf_counter() - begin) * 1000)
        episodes += 1
    client.close()
    return episodes


async def run_load(url: str, sessions: int, seconds: float) -> Result:
    """N concurrent WebSocket sessions doing episodes until the deadline."""
    latencies: list[float] = []
    start = time.perf_counter()
    counts = await asyncio.gather(*(_session(url, start + seconds, latencies) for _ in range(sessions)))
    return Result(sum(counts), time.perf_counter() - start, latencies)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkout(revision: str) -> Path:
    """The reasoning-gym service's packages as of ``revision``, extracted once under /tmp."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", revision], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    target = Path(tempfile.gettempdir()) / f"rg-env-{sha}"
    if not target.exists():
        staging = Path(tempfile.mkdtemp(prefix=f"rg-env-{sha}-"))
        archive = subprocess.run(
            ["git", "archive", sha, "services/reasoning_gym_env"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(staging)], input=archive, check=True)
        staging.rename(target)
    return target / "services/reasoning_gym_env"


def start_server(kind: str, port: int) -> subprocess.Popen:
    """Start 'stock' (uvicorn bench.stock_app:app), 'ours' (python -m reasoning_gym_env_server) or
    'ours@REV' (the same, with the server and client packages of git revision REV)."""
    env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning", "MAX_CONCURRENT_ENVS": "256"}
    if kind.startswith("ours"):
        cmd = [sys.executable, "-m", "reasoning_gym_env_server"]
        if "@" in kind:
            service = checkout(kind.split("@", 1)[1])
            env["PYTHONPATH"] = f"{service / 'server'}{os.pathsep}{service / 'client'}"
    else:
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.stock_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{kind} server did not become healthy")


def bench_server(kind: str, sessions: int, seconds: float) -> Result:
    port = _free_port()
    proc = start_server(kind, port)
    try:
        url = f"ws://127.0.0.1:{port}/ws"
        asyncio.run(run_load(url, sessions, min(1.0, seconds)))  # warm-up
        return asyncio.run(run_load(url, sessions, seconds))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def median_run(runs: list[Result]) -> tuple[float, float, float]:
    """Median episodes/s, p50 and p99 over repeated runs of one target."""
    return (
        statistics.median(r.episodes_per_s for r in runs),
        statistics.median(r.percentile(50) for r in runs),
        statistics.median(r.percentile(99) for r in runs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[32])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--dataset", default=DATASET["dataset_name"], help="reasoning-gym dataset of the episodes")
    parser.add_argument(
        "--baseline",
        nargs="*",
        default=[],
        metavar="REV",
        help="also measure our server as of these git revisions (side by side)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of all targets in turn; figures are medians over the rounds"
    )
    args = parser.parse_args()
    DATASET["dataset_name"] = args.dataset

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    library = run_library(args.seconds)
    print(
        f"reasoning-gym env server benchmark: {DATASET['dataset_name']}, {args.seconds:g}s per run, "
        f"median of {args.repeat} alternating round(s), load generator on the same {os.cpu_count()} cores"
    )
    print(
        f"{'target':<24}{'sessions':>9}{'episodes/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'vs library':>12}{'vs stock':>10}"
    )
    print(
        f"{'library (in-process)':<24}{1:>9}{library.episodes_per_s:>12.0f}{library.percentile(50):>9.3f}"
        f"{library.percentile(99):>9.3f}{'1.00':>12}{'':>10}"
    )
    kinds = {"openenv stock app": "stock", **{f"ours@{rev}": f"ours@{rev}" for rev in args.baseline}, "ours": "ours"}
    for sessions in args.sessions:
        runs: dict[str, list[Result]] = {name: [] for name in kinds}
        for _ in range(args.repeat):
            for name, kind in kinds.items():
                runs[name].append(bench_server(kind, sessions, args.seconds))
        stock_rate = median_run(runs["openenv stock app"])[0]
        for name in kinds:
            rate, p50, p99 = median_run(runs[name])
            print(
                f"{name:<24}{sessions:>9}{rate:>12.0f}{p50:>9.2f}{p99:>9.2f}{library.episodes_per_s / rate:>11.0f}x"
                f"{rate / stock_rate:>9.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
