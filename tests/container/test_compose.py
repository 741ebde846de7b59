"""`docker compose up --wait` brings the stack's services up healthy and `down -v` removes them."""

import os
import socket
import subprocess

import httpx
from tests.container.conftest import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_compose_up_wait_brings_reasoning_gym_env_up_healthy(env_image: str, base_image: str) -> None:
    port = _free_port()
    env = {**os.environ, "COMPOSE_PROJECT_NAME": "rlstack-test-compose", "REASONING_GYM_ENV_PORT": str(port),
           "BASE_IMAGE": base_image}
    compose = ["docker", "compose"]
    try:
        subprocess.run([*compose, "up", "--wait", "--wait-timeout", "120", "reasoning-gym-env"],
                       cwd=ROOT, env=env, check=True)
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()
        assert health["status"] == "healthy" and health["max_sessions"] == 64
        ps = subprocess.run([*compose, "ps", "--format", "{{.Service}} {{.Health}}"], cwd=ROOT, env=env,
                            check=True, capture_output=True, text=True).stdout
        assert "reasoning-gym-env healthy" in ps
    finally:
        subprocess.run([*compose, "down", "-v", "--remove-orphans"], cwd=ROOT, env=env, check=True)
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=com.docker.compose.project=rlstack-test-compose"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert left == ""
