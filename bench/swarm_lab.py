"""A two-node Docker Swarm on one machine, for the Swarm test and ``bench/scale_out.py``.

This engine becomes the manager (labelled ``gpu=true``: the stack's main node) and a
Docker-in-Docker worker (``docker/swarm-node.Dockerfile``) joins; the env images are copied to the
worker (``scripts/swarm-images.sh``) and the env services deployed as ``make swarm-up`` renders them
(``scripts/swarm_stack.py``). An existing container (the inference server) can be attached to the
stack's overlay network under an alias; a probe container on it reads each replica's ``/health``.
On exit the stack, the worker and its network are removed and this engine leaves the swarm.
"""

import contextlib
import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "bench" / "rollout_driver.py"
# A Docker engine in a container needs every capability this VM grants (--privileged asks for
# CAP_SYS_RESOURCE too, which it refuses) and the host's cgroups writable.
NODE_OPTIONS = [
    "--cap-add",
    "ALL",
    "--cap-drop",
    "SYS_RESOURCE",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--security-opt",
    "systempaths=unconfined",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "-v",
    "/var/lib/docker",
]
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
    """Run ``docker [-H host] ARGS``; its stdout (raises ``RuntimeError`` on failure when ``check``)."""
    command = ["docker", *(["-H", host] if host else []), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result.stdout.strip()


def free_port() -> int:
    """A TCP port free on this host now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_a_swarm() -> bool:
    """Whether this engine already belongs to a swarm (the lab makes and leaves its own)."""
    return docker("info", "-f", "{{.Swarm.LocalNodeState}}") != "inactive"


class Swarm:
    """The deployed stack: its tasks, its replicas' health, containers on its network."""

    def __init__(self, stack: str, worker: str, trainer_image: str) -> None:
        self.stack, self.worker, self.trainer_image = stack, worker, trainer_image
        self.network = f"{stack}_default"
        self.probe = ""

    def tasks(self, service: str) -> list[tuple[str, str]]:
        """(node, state) of the service's tasks that should be running."""
        lines = docker(
            "service",
            "ps",
            f"{self.stack}_{service}",
            "--filter",
            "desired-state=running",
            "--format",
            "{{.Node}} {{.CurrentState}}",
        ).splitlines()
        return [(line.split()[0], line.split()[1]) for line in lines if line.strip()]

    def wait_running(self, replicas: int, *services: str, timeout_s: float = 300) -> float:
        """Until every service has ``replicas`` running (healthy) tasks, each on its own node; seconds waited."""
        began = time.monotonic()
        while True:
            tasks = {s: self.tasks(s) for s in services}
            if all(
                len(t) == replicas and {state for _, state in t} == {"Running"} and len({n for n, _ in t}) == replicas
                for t in tasks.values()
            ):
                return time.monotonic() - began
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"services not running {replicas} per node after {timeout_s}s: {tasks}")
            time.sleep(2)

    def scale(self, replicas: int, *services: str) -> float:
        """Set the replica count of the services; seconds until they run."""
        docker("service", "scale", "--detach", *(f"{self.stack}_{s}={replicas}" for s in services))
        return self.wait_running(replicas, *services)

    def health(self, *services: str) -> dict[str, dict[str, dict[str, Any]]]:
        """Each replica's own /health, by service (default: the stack's env services) and address, read on
        the stack's network through ``tasks.<service>``."""
        services = services or ("reasoning-gym-env", "opencode-env")
        return json.loads(docker("exec", self.probe, "python3", "-c", PROBE, *services))

    def run(self, *args: str, volumes: dict[str, str] | None = None) -> str:
        """Start a detached container on the stack's network (``docker run ARGS``); its id."""
        mounts = [f"-v{src}:{dst}" for src, dst in (volumes or {}).items()]
        return docker("run", "-d", "--network", self.network, *mounts, *args)

    def rollouts(self, count: int, concurrency: int = 2) -> str:
        """Start ``bench/rollout_driver.py`` (``count`` OpenCode rollouts) on the network; its container id."""
        return self.run(
            "--entrypoint",
            "python3",
            self.trainer_image,
            "/driver.py",
            "--rollouts",
            str(count),
            "--concurrency",
            str(concurrency),
            "--wait-timeout-s",
            "240",
            volumes={str(DRIVER): "/driver.py:ro"},
        )


def finish(container: str, timeout_s: float = 900) -> str:
    """Wait for a detached container and remove it; its output, stdout then stderr (raises if it failed)."""
    code = docker("wait", container, timeout=timeout_s)
    logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
    docker("rm", "-f", container, check=False)
    if code != "0":
        raise RuntimeError(f"container exited {code}: {logs.stdout[-3000:]}{logs.stderr[-3000:]}")
    return logs.stdout + logs.stderr


def driver_records(output: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The per-rollout records and the summary ``bench/rollout_driver.py`` printed."""
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [r for r in lines if "rollout" in r], next(r["summary"] for r in lines if "summary" in r)


@contextlib.contextmanager
def local_swarm(
    base_image: str,
    tag: str,
    trainer_image: str,
    inference_container: str,
    settings: dict[str, str] | None = None,
    replicas: int = 2,
) -> Iterator[Swarm]:
    """The two-node swarm with the env services deployed (``replicas`` of each, one per node) and
    ``inference_container`` on the stack's network as ``inference``. ``settings``: stack settings
    (the .env variables) for the rendering."""
    name = uuid.uuid4().hex[:6]
    stack, nodes, worker = f"rlswarm{name}", f"rlstack-swarm-nodes-{name}", f"rlstack-swarm-worker-{name}"
    node_image = f"rlstack/swarm-node:{tag}"
    # No build context: the legacy builder does (BuildKit needs buildx in this CLI).
    docker(
        "build",
        "-q",
        "--build-arg",
        f"BASE_IMAGE={base_image}",
        "-t",
        node_image,
        "-",
        input=(ROOT / "docker/swarm-node.Dockerfile").read_text(),
    )
    docker("network", "create", nodes)
    swarm = Swarm(stack, worker, trainer_image)
    try:
        gateway = docker("network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", nodes)
        docker(
            "swarm",
            "init",
            "--advertise-addr",
            gateway,
            "--listen-addr",
            f"{gateway}:2377",
            "--data-path-addr",
            gateway,
        )
        docker("run", "-d", "--name", worker, "--hostname", worker, "--network", nodes, *NODE_OPTIONS, node_image)
        address = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", worker)
        worker_host = f"tcp://{address}:2375"
        deadline = time.monotonic() + 60
        while docker("info", "-f", "{{.ID}}", host=worker_host, check=False, timeout=10) == "":
            if time.monotonic() > deadline:
                raise TimeoutError("the worker's Docker engine did not start")
            time.sleep(1)
        docker(
            "swarm",
            "join",
            "--token",
            docker("swarm", "join-token", "-q", "worker"),
            f"{gateway}:2377",
            host=worker_host,
        )
        subprocess.run(
            [str(ROOT / "scripts/swarm-images.sh")],
            check=True,
            timeout=900,
            env={**os.environ, "SWARM_NODE_HOSTS": worker_host, "RLSTACK_TAG": tag},
        )
        docker("node", "update", "--label-add", "gpu=true", docker("info", "-f", "{{.Swarm.NodeID}}"))
        env = {
            **os.environ,
            "RLSTACK_TAG": tag,
            "ENV_REPLICAS": str(replicas),
            "OPENCODE_REPLICAS": str(replicas),
            "REASONING_GYM_ENV_PORT": str(free_port()),
            "OPENCODE_ENV_PORT": str(free_port()),
            **(settings or {}),
        }
        stack_file = subprocess.run(
            ["python3", str(ROOT / "scripts/swarm_stack.py"), "--only", "reasoning-gym-env", "opencode-env"],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
        docker("stack", "deploy", "--resolve-image", "never", "-c", "-", stack, input=stack_file)
        docker("network", "connect", "--alias", "inference", swarm.network, inference_container)
        swarm.probe = docker("run", "-d", "--network", swarm.network, "--entrypoint", "sleep", trainer_image, "7200")
        swarm.wait_running(replicas, "reasoning-gym-env", "opencode-env")
        yield swarm
    finally:
        docker("stack", "rm", stack, check=False)
        for container in docker("ps", "-aq", "--no-trunc", "--filter", f"network={swarm.network}", check=False).split():
            if container == inference_container:
                docker("network", "disconnect", "-f", swarm.network, container, check=False)
            else:
                docker("rm", "-f", container, check=False)
        docker("swarm", "leave", "--force", check=False)
        for volume in docker(
            "volume", "ls", "-q", "--filter", f"label=com.docker.stack.namespace={stack}", check=False
        ).split():
            docker("volume", "rm", "-f", volume, check=False)
        docker("rm", "-f", "-v", worker, check=False)
        docker("network", "rm", nodes, "docker_gwbridge", check=False)
