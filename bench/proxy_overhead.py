"""Cost of the OpenCode environment's proxy: the same chat completions sent straight to a canned
upstream and through the proxy (per-rollout keys, token capture, turn recording), side by side.

Prints, per concurrency and mode (unary, streaming): requests/s and p50/p99 latency both ways, the
latency the proxy adds and its throughput as a fraction of direct. Everything runs on this machine:
upstream, proxy and load generator share the cores.

    python bench/proxy_overhead.py [--concurrency 1 16 64] [--seconds 5]
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
BODY = {
    "model": "policy",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hello " * 50}],
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(argv: list[str], port: int, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(
        argv, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(300):
        try:
            urllib.request.urlopen(
                f"http://127.0.0.1:{port}/health"
                if "opencode" in " ".join(argv)
                else f"http://127.0.0.1:{port}/weight_info",
                timeout=1,
            )
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{argv} did not start")


async def worker(
    client: httpx.AsyncClient, url: str, key: str, stream: bool, deadline: float, out: list[float], budget: int
) -> None:
    headers = {"authorization": f"Bearer {key}"}
    body = {**BODY, "stream": stream}
    while time.perf_counter() < deadline and budget > 0:
        began = time.perf_counter()
        if stream:
            async with client.stream("POST", url, json=body, headers=headers) as response:
                async for _ in response.aiter_raw():
                    pass
        else:
            (await client.post(url, json=body, headers=headers)).raise_for_status()
        out.append((time.perf_counter() - began) * 1000)
        budget -= 1


async def load(url: str, keys: list[str], stream: bool, seconds: float) -> tuple[float, float, float]:
    """(requests/s, p50 ms, p99 ms) with one worker per key."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=len(keys), max_keepalive_connections=len(keys))
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(*(worker(client, url, k, stream, time.perf_counter() + 0.5, [], 50) for k in keys))
        began = time.perf_counter()
        await asyncio.gather(*(worker(client, url, k, stream, began + seconds, latencies, 900) for k in keys))
        elapsed = time.perf_counter() - began
    q = statistics.quantiles(latencies, n=100)
    return len(latencies) / elapsed, q[49], q[98]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    upstream_port, proxy_port = free_port(), free_port()
    upstream = serve(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.canned_upstream:app",
            "--port",
            str(upstream_port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        upstream_port,
        {},
    )
    scratch = tempfile.mkdtemp(prefix="proxy-bench-")
    proxy = serve(
        [sys.executable, "-m", "opencode_env_server"],
        proxy_port,
        {
            "PORT": str(proxy_port),
            "INFERENCE_URL": f"http://127.0.0.1:{upstream_port}",
            "INFERENCE_MODEL": "canned",
            "MAX_CONCURRENT_ROLLOUTS": str(max(args.concurrency)),
            "SANDBOX_NETWORK_ISOLATION": "off",
            "SANDBOX_ROOT": f"{scratch}/sandboxes",
            "TRACES_DIR": f"{scratch}/traces",
        },
    )
    try:
        print(f"proxy overhead vs direct (canned upstream, {args.seconds:g}s per run, {os.cpu_count()} shared cores)")
        print(
            f"{'mode':<10}{'conc':>5}{'direct req/s':>14}{'proxy req/s':>13}{'ratio':>7}"
            f"{'direct p50/p99 ms':>19}{'proxy p50/p99 ms':>18}{'added p50 ms':>14}"
        )
        for concurrency in args.concurrency:
            rollouts = [
                httpx.post(
                    f"http://127.0.0.1:{proxy_port}/rollouts",
                    timeout=30,
                    json={
                        "task": {
                            "instruction": "bench",
                            "limits": {"max_turns": 1000, "max_completion_tokens": 1_000_000},
                        },
                        "agent": "external",
                    },
                ).json()
                for _ in range(concurrency)
            ]
            keys = [r["api_key"] for r in rollouts]
            for stream in (False, True):
                d = asyncio.run(
                    load(f"http://127.0.0.1:{upstream_port}/v1/chat/completions", keys, stream, args.seconds)
                )
                p = asyncio.run(load(f"http://127.0.0.1:{proxy_port}/v1/chat/completions", keys, stream, args.seconds))
                print(
                    f"{'stream' if stream else 'unary':<10}{concurrency:>5}{d[0]:>14.0f}{p[0]:>13.0f}"
                    f"{p[0] / d[0]:>7.2f}"
                    f"{d[1]:>10.2f}/{d[2]:<8.2f}{p[1]:>9.2f}/{p[2]:<8.2f}{p[1] - d[1]:>14.2f}"
                )
            for r in rollouts:
                httpx.delete(f"http://127.0.0.1:{proxy_port}/rollouts/{r['rollout_id']}", timeout=30)
    finally:
        proxy.terminate()
        upstream.terminate()
        proxy.wait(10)
        upstream.wait(10)
        subprocess.run(["rm", "-rf", scratch])


if __name__ == "__main__":
    main()
