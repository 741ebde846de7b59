"""The GPU host check as a user runs it on a host without Docker, here on CPU: the wheel folder as
``make gpu-host-wheels`` builds it (for this Python, the base image's), a container holding only
Python, torch and transformers, with no network, and ``gpu-host-check.sh`` from the folder at CI
size (a tiny Qwen3-shaped model, 2 walkthrough steps, a short learning stage)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, TAG

pytestmark = pytest.mark.container
IMAGE = f"rlstack/bare-host:{TAG}"
CI_SIZE = ["--device", "cpu", "--shape", "tiny", "--steps", "2", "--learning", "short", "--min-gain", "-100"]
# The default timeouts are sized for a GPU; two CPU cores need more.
CPU_TIMEOUTS = [a for t in ("device=120", "walkthrough=900", "learning=900", "policy=900") for a in ("--timeout", t)]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpu-host-wheels")
    build = [sys.executable, "scripts/gpu_host_wheels.py", "--target-python", sys.executable, "--out", str(out)]
    subprocess.run(build, cwd=ROOT, check=True, timeout=1200)
    return out


@pytest.fixture(scope="module")
def bare_host(base_image: str, wheels: Path) -> str:
    """Python with torch and transformers and what they require, as the folder's manifest names them."""
    provides = json.loads((wheels / "manifest.json").read_text())["host_provides"]
    subprocess.run(
        ["docker", "build", "-q", "-f", "docker/bare-host.Dockerfile", "-t", IMAGE,
         "--build-arg", f"BASE_IMAGE={base_image}", "--build-arg", f"HOST_PACKAGES={' '.join(provides)}", "."],
        cwd=ROOT, check=True, env={**os.environ, "DOCKER_BUILDKIT": "0"}, timeout=1800,
    )  # fmt: skip
    return IMAGE


def host_check(image: str, wheels: Path, work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{wheels}:/wheels:ro", "-v", f"{work}:/work",
         image, "bash", "/wheels/gpu-host-check.sh", "--work", "/work", *args],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip


def test_the_check_passes_from_the_wheel_folder_alone_with_no_network(bare_host, wheels, tmp_path):
    run = host_check(bare_host, wheels, tmp_path, *CI_SIZE, *CPU_TIMEOUTS)
    report = json.loads((tmp_path / "report.json").read_text())
    assert run.returncode == 0 and report["verdict"] == "PASS", run.stdout[-4000:] + run.stderr[-2000:]
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["install", "device", "walkthrough", "learning"]
    assert all(s["verdict"] == "PASS" and s["seconds"] is not None for s in stages.values())
    assert stages["install"]["figures"]["site"] == "/work/site-packages"

    device = stages["device"]["figures"]
    assert device["cuda_available"] is False and device["torch"].endswith("+cpu") and device["trl"] == "1.16.0"

    walk = stages["walkthrough"]["figures"]
    assert walk["model"].startswith("random init of Qwen3-1.7B's architecture")
    assert walk["steps"] == 2 and walk["completions_per_step"] == 4
    # a random model never ends its turn: every completion runs to max_completion_length
    assert walk["completion_tokens_per_step"] == 4 * walk["max_completion_length"] == 1024
    assert walk["generated_tokens_per_s"] > 0
    assert walk["projected_walkthrough_s"] == round(walk["s_per_step"] * 150)
    assert walk["need_gib"] is None and walk["fits"] is None  # no GPU: nothing measured, nothing claimed

    learn = stages["learning"]["figures"]
    assert learn["steps"] == 2 and learn["steps_per_s"] > 0
    assert set(learn["policy_s"]) == {"default_model", "pretrain"}
    assert learn["sampled"]["mode"] == "T=1.0" and learn["greedy"]["mode"] == "greedy"
    assert (tmp_path / "outputs" / "learning" / "final" / "config.json").exists()


def test_a_wheel_missing_from_the_folder_fails_the_install_stage(bare_host, wheels, tmp_path):
    partial = tmp_path / "wheels"
    shutil.copytree(wheels, partial)
    for wheel in partial.glob("xxhash-*.whl"):
        wheel.unlink()
    work = tmp_path / "work"
    work.mkdir()
    run = host_check(bare_host, partial, work, *CI_SIZE)
    report = json.loads((work / "report.json").read_text())
    assert run.returncode == 1 and report["verdict"] == "FAIL"
    install = report["stages"][0]
    assert install["verdict"] == "FAIL" and "datasets needs xxhash: not installed" in install["figures"]["unmet"]
    assert all(s["verdict"] == "SKIPPED" for s in report["stages"][1:])
