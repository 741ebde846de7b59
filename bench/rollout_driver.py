"""Run OpenCode rollouts through the stack's client, from inside the stack's network; print one JSON
line per rollout and a summary. Used by the Swarm test and ``bench/scale_out.py`` (run in the
trainer image, which has the clients: ``python3 rollout_driver.py --env-url http://opencode-env:8000``).

Each rollout goes through ``OpenCodeServiceSessionFactory`` exactly as training does (a replica chosen by
free slots, every call pinned to it); a rollout is ``scored`` (its reward, 0 included) or an
``infra_failure`` (its replica failed or vanished: no reward). The summary counts both per replica
and reads each replica's own ``/health`` totals (``rollouts_total``) by address.
"""

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opencode_env_client import OpenCodeEnvError, OpenCodeServiceSessionFactory, RolloutNotScorable

TASK = {
    "task_id": "reverse-line",
    "instruction": "Write solution.py: read one line from stdin, print it reversed.",
    "tests": [{"stdin": "abc\n", "expected_stdout": "cba"}, {"stdin": "hello\n", "expected_stdout": "olleh"}],
}


def one_rollout(factory: OpenCodeServiceSessionFactory, index: int) -> dict[str, Any]:
    """Start, wait for, verify and close one rollout; what happened to it."""
    began = time.monotonic()
    record: dict[str, Any] = {"rollout": index}
    session = None
    try:
        session = factory.create(TASK)
        record["replica_url"] = session.client.base_url
        session.wait_for_completion()
        record.update(outcome="scored", reward=session.verify([]).env_reward)
    except (OpenCodeEnvError, RolloutNotScorable, TimeoutError) as exc:
        record.update(outcome="infra_failure", error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        if session is not None:
            session.close()
    record["seconds"] = round(time.monotonic() - began, 2)
    print(json.dumps(record), flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-url", default="http://opencode-env:8000")
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--wait-timeout-s", type=float, default=300.0)
    args = parser.parse_args()
    factory = OpenCodeServiceSessionFactory(
        args.env_url, [TASK], wait_timeout_s=args.wait_timeout_s, request_timeout_s=20
    )
    began = time.monotonic()
    with ThreadPoolExecutor(args.concurrency) as pool:
        records = list(pool.map(lambda i: one_rollout(factory, i), range(args.rollouts)))
    elapsed = time.monotonic() - began
    replicas = {address: health.model_dump() for address, health in factory.replicas.health().items()}
    per_replica: dict[str, dict[str, int]] = {}
    for r in records:
        counts = per_replica.setdefault(r.get("replica_url", "none"), {"scored": 0, "infra_failure": 0})
        counts[r["outcome"]] += 1
    print(
        json.dumps(
            {
                "summary": {
                    "rollouts": len(records),
                    "seconds": round(elapsed, 1),
                    "rollouts_per_min": round(60 * len(records) / elapsed, 2),
                    "per_replica_url": per_replica,
                    "replicas": replicas,
                }
            }
        ),
        flush=True,
    )
    sys.exit(0 if records else 1)


if __name__ == "__main__":
    main()
