"""Load benchmark of the reasoning-gym env server.

Runs the same episode loop (bare reset + step with an answer) three ways and prints them side by
side: in-process against reasoning-gym (the library's own cost), over WebSocket against OpenEnv's
stock app, and over WebSocket against our server. Each server runs in its own uvicorn process on
loopback; the load generator is one asyncio process with N concurrent sessions.

    python bench/env_server_load.py --sessions 32 --seconds 10 [--dataset leg_counting]
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import orjson
import websockets

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
        return statistics.quantiles(self.latencies_ms, n=1000)[int(q * 10) - 1] if len(self.latencies_ms) > 1 else self.latencies_ms[0]


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


async def _session(url: str, deadline: float, latencies: list[float]) -> int:
    episodes = 0
    async with websockets.connect(url, max_size=None, ping_interval=None) as ws:
        await ws.send(orjson.dumps({"type": "reset", "data": DATASET}).decode())
        await ws.recv()
        await ws.send(orjson.dumps({"type": "step", "data": {"answer": "42"}}).decode())
        await ws.recv()
        reset = orjson.dumps({"type": "reset", "data": {}}).decode()
        step = orjson.dumps({"type": "step", "data": {"answer": "42"}}).decode()
        while (begin := time.perf_counter()) < deadline:
            await ws.send(reset)
            reply = orjson.loads(await ws.recv())
            await ws.send(step)
            reply = orjson.loads(await ws.recv())
            if reply["type"] != "observation":
                raise RuntimeError(f"server error: {reply}")
            latencies.append((time.perf_counter() - begin) * 1000)
            episodes += 1
        await ws.send(orjson.dumps({"type": "close"}).decode())
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


def start_server(kind: str, port: int) -> subprocess.Popen:
    """Start 'ours' (python -m reasoning_gym_env_server) or 'stock' (uvicorn bench.stock_app:app)."""
    env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning", "MAX_CONCURRENT_ENVS": "256"}
    if kind == "ours":
        cmd = [sys.executable, "-m", "reasoning_gym_env_server"]
    else:
        cmd = [sys.executable, "-m", "uvicorn", "bench.stock_app:app", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "warning"]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[32])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--dataset", default=DATASET["dataset_name"], help="reasoning-gym dataset of the episodes")
    args = parser.parse_args()
    DATASET["dataset_name"] = args.dataset

    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass

    library = run_library(args.seconds)
    print(f"reasoning-gym env server benchmark: {DATASET['dataset_name']}, {args.seconds:g}s per run, "
          f"load generator on the same {os.cpu_count()} cores")
    print(f"{'target':<24}{'sessions':>9}{'episodes/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'vs library':>12}{'vs stock':>10}")
    print(f"{'library (in-process)':<24}{1:>9}{library.episodes_per_s:>12.0f}{library.percentile(50):>9.3f}"
          f"{library.percentile(99):>9.3f}{'1.00':>12}{'':>10}")
    for sessions in args.sessions:
        stock = bench_server("stock", sessions, args.seconds)
        ours = bench_server("ours", sessions, args.seconds)
        for name, result in (("openenv stock app", stock), ("ours", ours)):
            print(f"{name:<24}{sessions:>9}{result.episodes_per_s:>12.0f}{result.percentile(50):>9.2f}"
                  f"{result.percentile(99):>9.2f}{library.episodes_per_s / result.episodes_per_s:>11.0f}x"
                  f"{result.episodes_per_s / stock.episodes_per_s:>9.2f}x")


if __name__ == "__main__":
    main()
