"""scripts/swarm_stack.py: what Swarm does not take becomes what it does."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "swarm_stack.py"
spec = importlib.util.spec_from_file_location("swarm_stack", SCRIPT)
swarm_stack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(swarm_stack)

CONFIG = {
    "name": "rlstack",
    "services": {
        "inference": {
            "image": "rlstack/inference-cpu:dev",
            "build": {"context": "."},
            "restart": "unless-stopped",
            "depends_on": {"model-init": {"condition": "service_completed_successfully"}},
            "shm_size": "1073741824",
            "ports": [
                {"mode": "ingress", "host_ip": "127.0.0.1", "target": 8000, "published": "8000", "protocol": "tcp"}
            ],
            "volumes": [{"type": "volume", "source": "models", "target": "/models", "volume": {}}],
            "networks": {"default": None},
            "command": None,
        },
        "model-init": {
            "image": "rlstack/trainer-cpu:dev",
            "restart": "no",
            "cpu_shares": 4096,
            "volumes": [{"type": "volume", "source": "models", "target": "/models"}],
        },
        "trainer": {
            "image": "rlstack/trainer-cpu:dev",
            "restart": "no",
            "deploy": {"restart_policy": {"condition": "on-failure", "max_attempts": 40}},
            "volumes": [{"type": "volume", "source": "outputs", "target": "/outputs"}],
        },
    },
    "networks": {"default": {"name": "rlstack_default", "ipam": {}, "driver": "overlay", "attachable": True}},
    "volumes": {"models": {"name": "rlstack_models"}, "outputs": {"name": "rlstack_outputs"}},
}


def test_compose_only_settings_become_swarm_ones() -> None:
    stack = swarm_stack.render(CONFIG, [])
    inference = stack["services"]["inference"]
    assert not {"build", "depends_on", "restart", "shm_size", "command"} & set(inference)
    assert inference["ports"] == [{"target": 8000, "published": 8000, "protocol": "tcp", "mode": "host"}]
    assert {"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": 1073741824}} in inference["volumes"]
    assert inference["deploy"]["restart_policy"] == {"condition": "any"}
    assert stack["services"]["model-init"]["deploy"]["restart_policy"] == {"condition": "none"}
    assert "cpu_shares" not in stack["services"]["model-init"]  # Swarm's stack files have no CPU weight
    # A policy compose.swarm.yaml sets is kept.
    assert stack["services"]["trainer"]["deploy"]["restart_policy"]["max_attempts"] == 40
    assert stack["networks"] == {"default": {"driver": "overlay", "attachable": True}}
    assert stack["volumes"] == {"models": {}, "outputs": {}}
    assert "name" not in stack


def test_only_some_services_with_just_their_volumes() -> None:
    stack = swarm_stack.render(CONFIG, ["model-init"])
    assert list(stack["services"]) == ["model-init"]
    assert stack["volumes"] == {"models": {}}
    with pytest.raises(SystemExit, match="no service nope"):
        swarm_stack.render(CONFIG, ["nope"])
