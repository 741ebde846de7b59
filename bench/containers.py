"""Docker helpers shared by the container benchmarks."""

import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def docker(*args: str) -> str:
    """Run a docker command; returns its stdout (raises on failure)."""
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def wait_http(url: str, timeout_s: float, diagnose: Callable[[], str] | None = None) -> float:
    """Poll ``url`` until it answers; returns the seconds waited. On timeout, ``diagnose()`` (e.g. the
    container's log tail) is the error message."""
    began = time.monotonic()
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return time.monotonic() - began
        except OSError:
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(diagnose() if diagnose else url) from None
            time.sleep(0.5)


@contextmanager
def pretraining_setup(tag: str, prefix: str) -> Iterator[tuple[str, str]]:
    """What the CPU pre-training needs, as `make up` makes it: a private network on which the
    reasoning-gym env image answers as ``reasoning-gym-env``, and a models volume holding
    ``model-init``'s base model at /models/default. Yields (network, volume); removes them after."""
    name = uuid.uuid4().hex[:8]
    net, models = f"{prefix}-{name}", f"{prefix}-models-{name}"
    docker("network", "create", net)
    docker("volume", "create", models)
    gym = None
    try:
        docker(
            "run",
            "--rm",
            "-v",
            f"{models}:/models",
            "--entrypoint",
            "python3",
            f"rlstack/trainer-cpu:{tag}",
            "-m",
            "rlstack_default_model",
            "--out",
            "/models/default",
        )
        gym = docker(
            "run",
            "-d",
            "--network",
            net,
            "--network-alias",
            "reasoning-gym-env",
            "-p",
            "127.0.0.1::8000",
            f"rlstack/reasoning-gym-env:{tag}",
        )
        wait_http("http://" + docker("port", gym, "8000/tcp").splitlines()[0] + "/health", 60)
        yield net, models
    finally:
        if gym:
            subprocess.run(["docker", "rm", "-f", gym], capture_output=True)
        subprocess.run(["docker", "network", "rm", net], capture_output=True)
        subprocess.run(["docker", "volume", "rm", "-f", models], capture_output=True)
