"""`docker compose up --wait` brings the stack's services up healthy and `down -v` removes them."""

import os
import socket
import subprocess

import httpx

from tests.container.conftest import ROOT

GPU_COMPOSE = ["docker", "compose", "-f", "compose.yaml", "-f", "compose.gpu.yaml"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_compose_up_wait_brings_the_stack_up_healthy(env_image: str, base_image: str) -> None:
    env_port, inference_port, opencode_port = _free_port(), _free_port(), _free_port()
    env = {**os.environ, "COMPOSE_PROJECT_NAME": "rlstack-test-compose", "BASE_IMAGE": base_image,
           "REASONING_GYM_ENV_PORT": str(env_port), "INFERENCE_PORT": str(inference_port),
           "OPENCODE_ENV_PORT": str(opencode_port)}
    compose = ["docker", "compose"]
    try:
        subprocess.run([*compose, "up", "--build", "--wait", "--wait-timeout", "600", "reasoning-gym-env", "inference",
                        "opencode-env"],
                       cwd=ROOT, env=env, check=True)
        health = httpx.get(f"http://127.0.0.1:{env_port}/health", timeout=5).json()
        assert health["status"] == "healthy" and health["max_sessions"] == 64
        models = httpx.get(f"http://127.0.0.1:{inference_port}/v1/models", timeout=5).json()
        assert [m["id"] for m in models["data"]] == ["rlstack/tiny-qwen3"]
        reply = httpx.post(f"http://127.0.0.1:{inference_port}/v1/chat/completions", timeout=120, json={
            "model": "rlstack/tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "logprobs": True, "return_token_ids": True}).json()
        assert len(reply["choices"][0]["token_ids"]) == len(reply["choices"][0]["logprobs"]["content"]) > 0
        ps = subprocess.run([*compose, "ps", "--format", "{{.Service}} {{.Health}}"], cwd=ROOT, env=env,
                            check=True, capture_output=True, text=True).stdout
        assert "reasoning-gym-env healthy" in ps and "inference healthy" in ps and "opencode-env healthy" in ps
        opencode = httpx.get(f"http://127.0.0.1:{opencode_port}/health", timeout=5).json()
        assert opencode["network_isolation"] is True and opencode["inference_url"] == "http://inference:8000"
    finally:
        subprocess.run([*compose, "down", "-v", "--remove-orphans"], cwd=ROOT, env=env, check=True)
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=com.docker.compose.project=rlstack-test-compose"],
                          capture_output=True, text=True, check=True).stdout.strip()
    volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter", "label=com.docker.compose.project=rlstack-test-compose"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert left == "" and volumes == ""


def test_gpu_variant_is_valid_and_its_image_imports_vllm(base_image: str) -> None:
    """The GPU image cannot run here (no GPU); build it and import vLLM, and check the Compose wiring."""
    env = {**os.environ, "BASE_IMAGE": base_image}
    config = subprocess.run([*GPU_COMPOSE, "config", "--format", "json"], cwd=ROOT, env=env, check=True,
                            capture_output=True, text=True).stdout
    inference = __import__("json").loads(config)["services"]["inference"]
    assert inference["image"].startswith("rlstack/inference-gpu:")
    assert inference["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    assert inference["environment"]["WEIGHT_TRANSFER_BACKEND"] == "nccl"
    subprocess.run([*GPU_COMPOSE, "build", "inference"], cwd=ROOT, env=env, check=True)
    out = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python3", inference["image"], "-c",
                          "import vllm, rlstack_inference.serve; print(vllm.__version__)"],
                         check=True, capture_output=True, text=True).stdout
    assert out.strip().startswith("0.31.0")
