"""Fixtures that build the service images with Compose and start them with testcontainers."""

import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest
from testcontainers.core.container import DockerContainer

ROOT = Path(__file__).resolve().parents[2]
ENV_IMAGE = f"rlstack/reasoning-gym-env:{os.environ.get('RLSTACK_TAG', 'dev')}"

# The reaper image cannot be pulled on air-gapped hosts; containers are removed by the fixtures.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def wait_healthy(url: str, timeout_s: float = 90.0) -> None:
    """Poll ``url`` until it answers 200 or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not healthy after {timeout_s}s")
        time.sleep(0.25)


@pytest.fixture(scope="session")
def base_image() -> str:
    """The base image the stack builds on (official if pullable, else the offline one)."""
    return subprocess.run(
        [str(ROOT / "scripts/ensure-base-image.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="session")
def env_image(base_image: str) -> str:
    """The reasoning-gym env image, built (or found up to date) by Compose."""
    subprocess.run(
        ["docker", "compose", "build", "reasoning-gym-env"],
        cwd=ROOT, check=True, env={**os.environ, "BASE_IMAGE": base_image},
    )
    return ENV_IMAGE


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
