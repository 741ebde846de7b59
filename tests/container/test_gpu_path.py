"""The GPU variant without a GPU: what can be checked here would have caught the defects a reading of
TRL 1.16 and vLLM 0.31 found (a .env that turned the GPU stack into the CPU jobs, a root-owned cache
volume, sampling settings that never reached the rollouts, a weight-sync fallback that did not exist).

The GPU images are built (no GPU needed) and run on CPU up to the point where CUDA is needed."""

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import yaml

from tests.container.conftest import PROGRAMS, ROOT, left_by_project, smoke_jobs

GPU = ["docker", "compose", "-f", "compose.yaml", "-f", "compose.gpu.yaml"]
ONE_GPU = [*GPU, "-f", "compose.gpu-one.yaml"]
CONFIGS = ROOT / "trainer/trainer/configs"


def rendered(command: list[str], base_image: str) -> dict:
    """``docker compose config`` with the shipped .env.example as the user's .env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_", "GRPO_", "ASYNC_GRPO"))}
    out = subprocess.run(
        [*command, "--env-file", ".env.example", "config", "--format", "json"],
        cwd=ROOT,
        env={**env, "BASE_IMAGE": base_image},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def gpu_images(base_image: str) -> dict:
    """Build both GPU images; returns the rendered two-GPU config."""
    env = {**os.environ, "BASE_IMAGE": base_image, "PRECACHE_FA3": "0"}  # the FA3 kernel comes from the Hub
    subprocess.run([*GPU, "build", "inference", "trainer"], cwd=ROOT, env=env, check=True)
    return rendered(GPU, base_image)


def test_shipped_env_file_selects_the_gpu_configs(base_image: str) -> None:
    config = rendered(GPU, base_image)
    services = config["services"]
    trainer, inference, opencode = services["trainer"]["environment"], services["inference"], services["opencode-env"]
    assert (trainer["GRPO_CONFIG"], trainer["ASYNC_GRPO_CONFIG"]) == ("grpo-gpu.yaml", "async-grpo-gpu.yaml")
    assert trainer["TRAINER_MODEL"] == "Qwen/Qwen3-1.7B"
    # Step counts are passed only when set: by default the job YAML's max_steps applies.
    assert trainer["TRAINER_GRPO__MAX_STEPS"] == ""
    assert trainer["TRAINER_ASYNC_GRPO__MAX_STEPS"] == ""
    assert opencode["environment"]["INFERENCE_MODEL"] == inference["environment"]["SERVED_MODEL_NAME"]
    inflight = yaml.safe_load((CONFIGS / "async-grpo-gpu.yaml").read_text())["async_grpo"]["max_inflight_tasks"]
    assert int(opencode["environment"]["MAX_CONCURRENT_ROLLOUTS"]) >= inflight
    for name in ("HF_HUB_OFFLINE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_SOCKET_IFNAME"):
        assert name in inference["environment"], name
        assert name in trainer, name
    for service in (inference, services["trainer"]):
        assert service["ipc"] == "host"
        assert "shm_size" not in service  # shm_size is void with ipc: host
    gpus = [
        s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for s in (inference, services["trainer"])
    ]
    assert gpus == [["0"], ["1"]]
    assert trainer["VLLM_HOST_IP"] == services["trainer"]["networks"]["default"]["ipv4_address"]
    assert config["volumes"]["hf-cache"]["name"] == "rlstack-hf-cache"  # shared, outlives the project
    async_dtype = yaml.safe_load((CONFIGS / "async-grpo-gpu.yaml").read_text())["async_grpo"]["dtype"]
    assert inference["environment"]["DTYPE"] == async_dtype  # no trainer/server precision gap
    # The weight-sync probe's tolerance follows the dtype the server really serves in.
    assert trainer["TRAINER_INFERENCE__DTYPE"] == inference["environment"]["DTYPE"]
    # One NCCL host identity, cuMem off: the weights go over shared memory, not TCP on the bridge.
    assert trainer["NCCL_HOSTID"] == inference["environment"]["NCCL_HOSTID"] != ""
    assert trainer["NCCL_CUMEM_ENABLE"] == inference["environment"]["NCCL_CUMEM_ENABLE"] == "0"


def test_one_gpu_variant_runs_the_walkthrough_without_vllm_or_opencode(base_image: str) -> None:
    config = rendered(ONE_GPU, base_image)
    services = config["services"]
    # Their profile is off: AsyncGRPO, the only job that needs them, cannot run on one GPU.
    assert "inference" not in services
    assert "opencode-env" not in services
    trainer = services["trainer"]
    assert set(trainer["depends_on"]) == {"reasoning-gym-env"}
    assert trainer["environment"]["GRPO_CONFIG"] == "grpo-walkthrough.yaml"  # the upstream walkthrough
    assert trainer["environment"]["ASYNC_GRPO"] == "off"
    assert trainer["deploy"]["resources"]["reservations"]["devices"] == [
        {"capabilities": ["gpu"], "driver": "nvidia", "device_ids": ["0"]}
    ]
    # Nothing loads AsyncGRPO's FA3 kernel: the image builds without the Hub download.
    for name in ("trainer", "dashboard"):
        assert services[name]["build"]["args"]["PRECACHE_FA3"] == "0", name


@pytest.mark.parametrize("command", [GPU, ONE_GPU], ids=["two-gpus", "one-gpu"])
def test_the_gpu_stack_never_builds_the_cpu_trainer_image(command: list[str], base_image: str) -> None:
    """The CPU trainer image copies wheelhouse/, which only `make up` / `make build` fill: a GPU host
    (`make up-gpu`, `make gpu-smoke`) must not need it."""
    services = rendered(command, base_image)["services"]
    assert services["dashboard"]["image"] == services["trainer"]["image"]
    for name, service in services.items():
        assert (service.get("build") or {}).get("dockerfile") != "docker/trainer-cpu.Dockerfile", name


def test_the_fa3_precache_downloads_the_kernel_trl_loads(gpu_images: dict) -> None:
    image = gpu_images["services"]["trainer"]["image"]
    out = subprocess.run(
        ["docker", "run", "--rm", "-v", f"{PROGRAMS}:/programs:ro", "--entrypoint", "python3", image]
        + ["/programs/fa3_precache_matches_trl.py"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "True", out.stderr


@contextmanager
def fresh_volumes(service: dict) -> Iterator[list[str]]:
    """``docker run`` mount flags giving each named volume of ``service`` a new, empty volume."""
    created, flags = [], []
    for mount in service["volumes"]:
        if mount["type"] != "volume":
            continue
        name = f"rlstack-test-{uuid.uuid4().hex[:8]}"
        subprocess.run(["docker", "volume", "create", name], check=True, capture_output=True)
        created.append(name)
        flags += ["-v", f"{name}:{mount['target']}" + (":ro" if mount.get("read_only") else "")]
    try:
        yield flags
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", *created], capture_output=True)


def test_inference_gpu_caches_are_writable_by_its_user_on_fresh_volumes(gpu_images: dict) -> None:
    inference = gpu_images["services"]["inference"]
    with fresh_volumes(inference) as mounts:
        out = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                *mounts,
                "--entrypoint",
                "python3",
                inference["image"],
                "-c",
                "import os; from rlstack_inference.serve import unwritable_caches; "
                "print(os.getuid(), os.environ['HF_HOME'], unwritable_caches(dict(os.environ)))",
            ],
            capture_output=True,
            text=True,
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["10001", "/cache/huggingface", "[]"], out.stdout


def test_inference_refuses_to_start_on_an_unwritable_cache(gpu_images: dict) -> None:
    inference = gpu_images["services"]["inference"]
    volume = f"rlstack-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "volume", "create", volume], check=True, capture_output=True)
    try:
        # A root-owned volume with content (so Docker does not copy the image's folder into it), as
        # the image without the folder gave: the old defect.
        subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "-u",
                "0",
                "-v",
                f"{volume}:/data",
                "--entrypoint",
                "sh",
                inference["image"],
                "-c",
                "touch /data/keep && chown 0:0 /data && chmod 755 /data",
            ],
            check=True,
        )
        out = subprocess.run(
            ["docker", "run", "--rm", "-v", f"{volume}:/cache/huggingface", "-e", "MODEL=Qwen/x", inference["image"]],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)
    assert out.returncode != 0
    assert "cache folders not writable by uid 10001: HF_HOME=/cache/huggingface" in out.stderr


def test_trainer_gpu_caches_and_kernel_cache_are_writable_on_fresh_volumes(gpu_images: dict) -> None:
    trainer = gpu_images["services"]["trainer"]
    with fresh_volumes(trainer) as mounts:
        out = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                *mounts,
                "--entrypoint",
                "python3",
                trainer["image"],
                "-c",
                "import os; from trainer.gpu.device_check import unwritable; "
                "print(os.environ['KERNELS_CACHE'], unwritable([os.environ['HF_HOME'], os.environ['KERNELS_CACHE'], "
                "'/outputs', '/weights']))",
            ],
            capture_output=True,
            text=True,
        )
    assert out.returncode == 0, out.stderr
    # The kernel cache lives outside HF_HOME, so the hf-cache volume cannot hide a baked-in kernel.
    kernels, problems = out.stdout.split(maxsplit=1)
    assert not kernels.startswith("/cache/huggingface"), out.stdout
    assert problems.strip() == "[]", out.stdout


def dry_run(image: str, job: str, config: str, *overrides: str) -> subprocess.CompletedProcess:
    sets = [arg for o in overrides for arg in ("--set", o)]
    return subprocess.run(
        ["docker", "run", "--rm", image, job, "--config", config, *sets, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_trainer_builds_trl_configs_from_the_gpu_yamls_on_cpu(gpu_images: dict) -> None:
    image = gpu_images["services"]["trainer"]["image"]
    grpo = dry_run(image, "grpo", "grpo-gpu.yaml")
    assert grpo.returncode == 0, grpo.stderr
    plan = json.loads(grpo.stdout)
    assert plan["weight_sync"] == "nccl"
    assert plan["generation"]["vllm_mode"] == "server"
    assert plan["eval"]["generate"] == "inference"
    assert plan["colocated_vllm"] is None
    assert plan["trainer"]["save_total_limit"] == 2
    assert plan["trainer"]["save_only_model"] is True

    # The walkthrough (one GPU's default), as TRL gets it on a CUDA host.
    walkthrough = json.loads(dry_run(image, "grpo", "grpo-walkthrough.yaml").stdout)
    # With push_to_hub the repository is named after the job's output folder, not after the
    # <output_dir>/checkpoints folder TRL writes into (what transformers would name it after).
    pushed = json.loads(dry_run(image, "grpo", "grpo-walkthrough.yaml", "grpo.push_to_hub=true").stdout)["trainer"]
    assert (pushed["push_to_hub"], pushed["hub_model_id"]) == (True, "reasoning-gym-chain-sum-Qwen3-1.7B")
    assert walkthrough["env"] == {
        "url": "http://reasoning-gym-env:8000",
        "dataset": "chain_sum",
        "dataset_config": {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2},
        "seed": 42,
        "question_seeds": "per_environment",
    }
    trainer = walkthrough["trainer"]
    assert (trainer["per_device_train_batch_size"], trainer["gradient_accumulation_steps"]) == (1, 4)
    assert (trainer["learning_rate"], trainer["warmup_steps"], trainer["max_steps"]) == (1e-6, 10, 150)
    assert (trainer["optim"], trainer["max_grad_norm"], trainer["logging_steps"]) == ("adamw_torch", 1.0, 10)
    assert (trainer["save_strategy"], trainer["gradient_checkpointing"]) == ("no", True)
    assert trainer["dtype"] == "float32"  # TRL's default, as in the walkthrough
    generation = walkthrough["generation"]
    assert (generation["use_vllm"], generation["num_generations"], generation["max_completion_length"]) == (
        False,
        2,
        256,
    )
    assert generation["chat_template_kwargs"] == {"enable_thinking": False}
    assert walkthrough["eval"]["generate"] == "local"

    one = json.loads(dry_run(image, "grpo", "grpo-gpu-one.yaml").stdout)
    assert one["generation"]["vllm_mode"] == "colocate"
    assert one["colocated_vllm"]["enable_sleep_mode"] is True
    assert one["eval"]["generate"] == "local"
    assert one["weight_sync"] == "none"
    # Same effective batch as the two-GPU config.
    assert (
        one["trainer"]["per_device_train_batch_size"] * one["trainer"]["gradient_accumulation_steps"]
        == plan["trainer"]["per_device_train_batch_size"] * plan["trainer"]["gradient_accumulation_steps"]
    )

    max_model_len = int(gpu_images["services"]["inference"]["environment"]["MAX_MODEL_LEN"])
    asynch = dry_run(image, "async-grpo", "async-grpo-gpu.yaml")
    assert asynch.returncode == 0, asynch.stderr
    plan = json.loads(asynch.stdout)
    worker = plan["rollout_worker"]
    assert plan["trainer"]["dtype"] == "float32"
    assert plan["trainer"]["gradient_checkpointing"] is True
    # TRL sets an unset token_budget to the server's max_model_len: a harness sample is a whole
    # conversation, as long as the server allows; a smaller budget would drop the long ones.
    assert plan["trainer"]["token_budget"] is None
    assert worker["max_tokens"] <= max_model_len
    assert worker["max_inflight_tasks"] == 8
    assert worker["chat_template_kwargs"] == {"enable_thinking": False}
    # TRL's harness hands the session factory its sampling policy only: the thinking switch reaches
    # OpenCode's model calls through the factory's own settings.
    assert plan["session_factory"]["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize(
    "job, config, output",
    [
        ("SMOKE_GRPO_JOB", "GRPO_CONFIG=grpo-gpu.yaml", "SMOKE_GRPO_OUTPUT"),
        # One GPU's smoke: the walkthrough's warmup_steps 10 would make a one-step run's rate 0.
        ("SMOKE_GRPO_JOB", "GRPO_CONFIG=grpo-walkthrough.yaml", "SMOKE_GRPO_OUTPUT"),
        ("SMOKE_ASYNC_GRPO_JOB", "ASYNC_GRPO_CONFIG=async-grpo-gpu.yaml", "SMOKE_ASYNC_GRPO_OUTPUT"),
    ],
    ids=["grpo", "grpo-walkthrough", "async-grpo"],
)
def test_the_smoke_jobs_reach_the_gpu_trainer_whole(gpu_images: dict, job: str, config: str, output: str) -> None:
    """`make gpu-smoke`'s job lines through the GPU trainer's own shell (/bin/sh -ec, as compose runs
    them), dry-run: every --set arrives, so the facts the smoke reads land where it looks."""
    jobs = smoke_jobs()
    out = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "/bin/sh", "-e", config, gpu_images["services"]["trainer"]["image"]]
        + ["-ec", f"{jobs[job]} --dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["output_dir"] == jobs[output]
    assert plan["trainer"]["max_steps"] == 1
    assert plan["trainer"]["first_step_learning_rate"] > 0  # the probe needs the step to move the weights
    if plan["job"] == "grpo":
        assert plan["eval"]["before_after"] is False


def test_vllm_finds_what_it_requires_in_the_gpu_trainer_image(gpu_images: dict) -> None:
    """TRL's colocated mode (grpo-gpu-one.yaml) imports vLLM in the trainer: every requirement vLLM
    declares is installed at a version it accepts, but for the MCP extras vLLM's tool server alone uses."""
    script = (
        "import importlib.metadata as m\n"
        "from packaging.requirements import Requirement\n"
        "for text in m.requires('vllm') or []:\n"
        "    r = Requirement(text)\n"
        "    if r.marker and not r.marker.evaluate({'extra': ''}):\n"
        "        continue\n"
        "    try:\n"
        "        ok = r.specifier.contains(m.version(r.name), prereleases=True)\n"
        "    except m.PackageNotFoundError:\n"
        "        ok = False\n"
        "    if not ok:\n"
        "        print(r.name)\n"
    )
    out = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "python3", gpu_images["services"]["trainer"]["image"], "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["mcp"], out.stdout


def test_every_sampling_setting_reaches_the_rollout_worker(gpu_images: dict) -> None:
    image = gpu_images["services"]["trainer"]["image"]
    out = dry_run(
        image,
        "async-grpo",
        "async-grpo-gpu.yaml",
        "async_grpo.temperature=0.7",
        "async_grpo.top_k=0",
        "async_grpo.max_tool_calling_iterations=6",
        "async_grpo.max_completion_length=4096",
        "async_grpo.request_timeout=120",
        "async_grpo.max_inflight_tasks=-1",
    )
    assert out.returncode == 0, out.stderr
    worker = json.loads(out.stdout)["rollout_worker"]
    assert {
        k: worker[k]
        for k in (
            "temperature",
            "top_p",
            "top_k",
            "min_p",
            "repetition_penalty",
            "max_tool_calling_iterations",
            "max_tokens",
            "request_timeout",
        )
    } == {
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": None,
        "repetition_penalty": 1.0,
        "max_tool_calling_iterations": 6,
        "max_tokens": 4096,
        "request_timeout": 120,
    }
    assert worker["max_inflight_tasks"] == 4 * 4  # TRL's -1: max_staleness x per-step samples


@pytest.mark.parametrize(
    "job, config, override, message",
    [
        ("grpo", "grpo-gpu.yaml", "weight_sync.mode=checkpoint", "TRL always syncs the weights to vLLM over NCCL"),
        ("grpo", "grpo-cpu.yaml", "weight_sync.mode=nccl", "weight_sync.mode: nccl is TRL's vLLM server mode"),
        # vLLM server mode scores a group's completions against its first instance's question.
        ("grpo", "grpo-gpu.yaml", "reasoning_gym.question_seeds=per_environment", "would mis-score"),
        # A before/after evaluation on a server whose weights never change would score one model twice.
        ("grpo", "grpo-cpu.yaml", "eval.generate=inference", "which weight_sync.mode: none never updates"),
        (
            "async-grpo",
            "async-grpo-gpu.yaml",
            "weight_sync.mode=checkpoint",
            "weight_sync does not apply to async-grpo",
        ),
        # TRL's config fields are checked by name (with a suggestion) and type before TRL sees them.
        (
            "async-grpo",
            "async-grpo-gpu.yaml",
            "async_grpo.top_pp=0.9",
            "unknown key `async_grpo.top_pp`: did you mean `top_p`?",
        ),
        (
            "grpo",
            "grpo-gpu.yaml",
            "grpo.lerning_rate=0.1",
            "unknown key `grpo.lerning_rate`: did you mean `learning_rate`?",
        ),
        ("grpo", "grpo-cpu.yaml", "grpo.max_steps=many", "`grpo.max_steps`: expected int, got str 'many'"),
        # OpenEnv's harness trains the full-vocabulary policy: a filter would make vLLM's logprobs differ.
        ("async-grpo", "async-grpo-gpu.yaml", "async_grpo.top_p=0.9", "training sampling requires top_p=1.0"),
        ("async-grpo", "async-grpo-cpu.yaml", "async_grpo.repetition_penalty=1.1", "requires repetition_penalty=1.0"),
    ],
)
def test_inconsistent_gpu_settings_fail_before_anything_loads(
    gpu_images: dict, job: str, config: str, override: str, message: str
) -> None:
    out = dry_run(gpu_images["services"]["trainer"]["image"], job, config, override)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr, out.stderr


def test_preflight_without_the_nvidia_toolkit_says_so(base_image: str) -> None:
    out = subprocess.run(
        ["bash", "-c", "source scripts/gpu-preflight.sh && gpu_preflight"],
        cwd=ROOT,
        env={**os.environ, "BASE_IMAGE": base_image},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "NVIDIA container toolkit" in out.stdout, out.stdout


TWO_H100 = (
    "0, NVIDIA H100 80GB HBM3, 9.0, 81559, 81000, 580.95.05\n1, NVIDIA H100 80GB HBM3, 9.0, 81559, 81000, 580.95.05\n"
)


def gpu_smoke(base_image: str, tmp_path, subnet: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`make gpu-smoke` on this GPU-less host, the pre-flight reading a fake two-H100 nvidia-smi."""
    smi = tmp_path / "nvidia-smi.csv"
    smi.write_text(TWO_H100)
    logs = tmp_path / "logs"
    out = subprocess.run(
        ["bash", "scripts/gpu-smoke.sh"],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("GPU_", "SMOKE_"))},
            "BASE_IMAGE": base_image,
            "GPU_PREFLIGHT_NVIDIA_SMI_OUTPUT": str(smi),
            "SMOKE_LOG_DIR": str(logs),
            "SMOKE_GPU_SUBNET": subnet,
            "SMOKE_SERVICES_TIMEOUT_S": "300",
            # No Hub here: the images build without the FA3 download (its own test covers it).
            "PRECACHE_FA3": "0",
        },
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return out, json.loads((logs / "verdicts.json").read_text())["stages"]


def test_gpu_smoke_refuses_up_front_when_its_subnet_is_taken(base_image: str, tmp_path) -> None:
    subnet, network = "172.30.97.0/24", f"rlstack-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "network", "create", "--subnet", subnet, network], check=True, capture_output=True)
    try:
        out, stages = gpu_smoke(base_image, tmp_path, subnet)
    finally:
        subprocess.run(["docker", "network", "rm", network], capture_output=True)
    assert out.returncode == 1
    assert stages == [
        {
            "stage": "isolation",
            "verdict": "FAIL",
            "detail": f"subnet {subnet} is taken by network {network}: set SMOKE_GPU_SUBNET to a free /24",
        }
    ]


def test_gpu_smoke_writes_a_verdict_per_stage_and_leaves_nothing_running(
    gpu_images: dict, base_image: str, tmp_path
) -> None:
    """Without a GPU the services stage fails (no NVIDIA runtime for vLLM): the stages before it pass,
    each verdict is in verdicts.json, and the smoke project is gone afterwards."""
    out, stages = gpu_smoke(base_image, tmp_path, "172.30.98.0/24")
    assert out.returncode == 1, out.stdout[-3000:]
    assert [(s["stage"], s["verdict"]) for s in stages] == [
        ("isolation", "PASS"),
        ("pre-flight", "PASS"),
        ("images", "PASS"),
        ("services", "FAIL"),
    ], out.stdout[-3000:]
    assert stages[0]["detail"].startswith("project rlstack-gpu-smoke, subnet 172.30.98.0/24, trainer 172.30.98.10")
    assert left_by_project("rlstack-gpu-smoke") == []
