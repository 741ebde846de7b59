"""GPU pre-flight: what the GPU stack needs from the host, checked before anything long starts.

``make up-gpu`` / ``make gpu-smoke`` run this file with ``python3`` in a container with
``--gpus all`` (standard library only, so any Python image does), which also proves that the NVIDIA
container toolkit works; it reads ``nvidia-smi`` and decides the topology:

- ``two``: vLLM (``inference``) on INFERENCE_GPU, the trainer on TRAINER_GPU, NCCL weight sync
  between them. NCCL cannot place both ends of a group on one device, so the two must differ.
- ``one``: one GPU; the GRPO job (the upstream walkthrough by default, generating in the trainer;
  ``grpo-gpu-one.yaml`` runs vLLM inside the trainer) and no AsyncGRPO, which only talks to a
  separate vLLM server.

It also decides the dtype vLLM serves in (``inference_dtype=``): float32 when AsyncGRPO will run on
the server (TRL's AsyncGRPO is measured against a float32 trainer and server), bfloat16 when only
GRPO does (bfloat16 kernels; GRPO's forward runs under bfloat16 autocast), unless
GPU_INFERENCE_DTYPE is set.

What only the trainer container can see (CUDA usable by torch, the device's compute capability,
writable caches) is checked at the start of a CUDA job by ``device_check``.

    python3 preflight.py [--nvidia-smi-output FILE]    # settings from the environment
"""

import argparse
import csv
import io
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The torch builds of both GPU images are CUDA 13.0, which needs an R580 driver or newer.
MIN_DRIVER = (580, 0)
# AsyncGRPO's attention kernel (kernels-community/flash-attn3, loaded by TRL's tree attention) is
# built for these compute capabilities only (A100/A800/A30: 8.0; H100/H200/H800: 9.0).
FA3_CAPABILITIES = ("8.0", "9.0")
# Qwen3-1.7B's shape (its config.json): parameters, layers, width, MLP width, vocabulary, and K and V
# per token as vLLM caches them (28 layers x 8 KV heads x 128).
QWEN3_1_7B_PARAMETERS = 1.72e9
QWEN3_1_7B_LAYERS, QWEN3_1_7B_HIDDEN, QWEN3_1_7B_INTERMEDIATE = 28, 2048, 6144
QWEN3_1_7B_VOCABULARY = 151_936
QWEN3_1_7B_KV_VALUES_PER_TOKEN = 2 * 28 * 8 * 128
GIB = 1024.0
# Trained in float32 with AdamW: 16 bytes per parameter (weights, gradients, two moments).
TRAINING_STATE_GIB = 16 * QWEN3_1_7B_PARAMETERS / GIB**3


def activations_gib(tokens: int, logit_tokens: int = 0) -> float:
    """Activation memory of one micro-batch of ``tokens`` under gradient checkpointing: every layer's
    float32 input kept, one layer's recompute (its bfloat16 MLP and attention projections), and the
    logits of ``logit_tokens`` (TRL computes them for the completion only: bfloat16 plus the float32
    copy the temperature division makes, 6 bytes per vocabulary entry; 0 with a fused, chunked head)."""
    kept = QWEN3_1_7B_LAYERS * QWEN3_1_7B_HIDDEN * 4
    recompute = 4 * QWEN3_1_7B_INTERMEDIATE * 2 + 6 * QWEN3_1_7B_HIDDEN * 2
    return (tokens * (kept + recompute) + logit_tokens * 6 * QWEN3_1_7B_VOCABULARY) / GIB**3


@dataclass(frozen=True)
class MemoryNeed:
    """The trainer's GPU memory for a job config, and where the figure comes from."""

    gib: float
    source: str  # "published" (a measured peak someone published), "derived" (from the shapes) or "set"
    basis: str

    def describe(self) -> str:
        return f"~{self.gib:.1f} GiB, {self.source}: {self.basis}"


# The upstream walkthrough's own figure for grpo-walkthrough.yaml ("peaking around ~38 GB of VRAM" on
# one A100 40 GB), taken as GiB, as nvidia-smi shows it.
WALKTHROUGH_PEAK_GIB = 38.0
# Prompt tokens of a reasoning-gym rollout (system turn with the tool schema, prompt, question).
PROMPT_TOKENS = 300
# What the derivation leaves out (CUDA context, allocator slack, generation's KV cache and buffers),
# calibrated on the one published peak: the walkthrough's 38 GiB less what its shapes (batch 1, 256
# completion tokens) derive to.
TRAINER_OVERHEAD_GIB = WALKTHROUGH_PEAK_GIB - TRAINING_STATE_GIB - activations_gib(PROMPT_TOKENS + 256, 256)


def grpo_memory(batch: int, completion_tokens: int) -> MemoryNeed:
    """A GRPO config's trainer: micro-batches of ``batch`` rollouts of up to ``completion_tokens``."""
    return MemoryNeed(
        TRAINING_STATE_GIB
        + activations_gib(batch * (PROMPT_TOKENS + completion_tokens), batch * completion_tokens)
        + TRAINER_OVERHEAD_GIB,
        "derived",
        f"16 bytes per parameter, micro-batches of {batch} x {completion_tokens} completion tokens with their "
        f"logits, {TRAINER_OVERHEAD_GIB:.1f} GiB beside them as in the walkthrough's peak",
    )


TRAINER_MEMORY = {
    "grpo-walkthrough.yaml": MemoryNeed(
        WALKTHROUGH_PEAK_GIB, "published", "the upstream walkthrough's peak on one A100 40 GB"
    ),
    "grpo-gpu.yaml": grpo_memory(8, 1024),
    "grpo-gpu-one.yaml": grpo_memory(2, 1024),
}


def async_grpo_memory(token_budget: int) -> MemoryNeed:
    """AsyncGRPO's trainer (async-grpo-gpu.yaml): rows of up to ``token_budget`` tokens (TRL's default:
    the server's max_model_len), TRL's fused, chunked head (no full logits)."""
    return MemoryNeed(
        TRAINING_STATE_GIB + activations_gib(token_budget) + TRAINER_OVERHEAD_GIB,
        "derived",
        f"16 bytes per parameter, rows of up to {token_budget:,} tokens (token_budget: GPU_MAX_MODEL_LEN), "
        f"{TRAINER_OVERHEAD_GIB:.1f} GiB beside them as in the walkthrough's peak",
    )


# grpo-gpu-one.yaml's vllm_gpu_memory_utilization: vLLM's share of the one GPU.
COLOCATED_VLLM_SHARE = 0.25
# The stack's defaults of the settings read here (compose.gpu.yaml; tests/unit/test_env_example.py
# checks them against .env.example). vLLM has its GPU to itself in the two-GPU topology.
STACK_DEFAULTS = {
    "GPU_VLLM_EXTRA_ARGS": "--gpu-memory-utilization 0.9",
    "GPU_MODEL": "Qwen/Qwen3-1.7B",
    "GPU_MAX_MODEL_LEN": "32768",
    "GPU_MAX_CONCURRENT_ROLLOUTS": "8",
    "GPU_GRPO_CONFIG": "grpo-gpu.yaml",
    "GPU_ONE_GRPO_CONFIG": "grpo-walkthrough.yaml",
    "GPU_ASYNC_GRPO_CONFIG": "async-grpo-gpu.yaml",
}
# The dtype vLLM serves in unless GPU_INFERENCE_DTYPE says: AsyncGRPO's (TRL's measured float32), else
# GRPO's compute dtype (bfloat16 autocast).
ASYNC_GRPO_INFERENCE_DTYPE = "float32"
GRPO_INFERENCE_DTYPE = "bfloat16"
# The one-GPU config that runs vLLM inside the trainer (its share: COLOCATED_VLLM_SHARE).
COLOCATED_CONFIG = "grpo-gpu-one.yaml"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "half": 2, "auto": 2}
# vLLM's own activations and CUDA graphs beside the weights and the KV cache (an estimate).
VLLM_OVERHEAD_GIB = 2.0
QUERY = "index,name,compute_cap,memory.total,memory.free,driver_version"


@dataclass(frozen=True)
class Gpu:
    """One row of ``nvidia-smi --query-gpu`` (memory in MiB)."""

    index: int
    name: str
    compute_cap: str
    memory_total_mib: float
    memory_free_mib: float
    driver_version: str


@dataclass
class Verdict:
    """What the pre-flight found: one line per check, the topology, and whether to go on."""

    topology: str | None = None
    lines: list[str] = field(default_factory=list)
    failed: bool = False
    async_grpo: bool = True
    one_gpu: int | None = None
    inference_dtype: str | None = None

    def ok(self, message: str) -> None:
        self.lines.append(f"ok    {message}")

    def fail(self, message: str) -> None:
        self.lines.append(f"FAIL  {message}")
        self.failed = True

    def note(self, message: str) -> None:
        self.lines.append(f"note  {message}")


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Rows of ``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits``."""
    gpus = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 6:
            raise ValueError(f"unexpected nvidia-smi row {row!r} (expected {QUERY})")
        index, name, cap, total, free, driver = (cell.strip() for cell in row)
        gpus.append(Gpu(int(index), name, cap, float(total), float(free), driver))
    return gpus


def driver_at_least(version: str, minimum: tuple[int, int] = MIN_DRIVER) -> bool:
    """Whether an NVIDIA driver version string (``580.65.06``) is at least ``minimum``."""
    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    return tuple(parts + [0] * (2 - len(parts))) >= minimum


def vllm_share(extra_args: str) -> float:
    """The ``--gpu-memory-utilization`` in vLLM's extra flags (vLLM's default when absent)."""
    args = shlex.split(extra_args or "")
    for i, arg in enumerate(args):
        if arg.startswith("--gpu-memory-utilization="):
            return float(arg.split("=", 1)[1])
        if arg == "--gpu-memory-utilization" and i + 1 < len(args):
            return float(args[i + 1])
    return 0.9


def _flag(env: Mapping[str, str], name: str, default: str) -> str:
    return (env.get(name) or default).strip().lower()


def plan(gpus: Sequence[Gpu], env: Mapping[str, str]) -> Verdict:
    """Decide the topology and check driver, GPU ids, compute capability and free memory.

    Settings (the stack's variables): GPU_TOPOLOGY (auto|one|two), INFERENCE_GPU, TRAINER_GPU,
    ONE_GPU, GPU_ASYNC_GRPO (on|off), GPU_VLLM_EXTRA_ARGS, GPU_GRPO_CONFIG, GPU_ONE_GRPO_CONFIG and
    GPU_ASYNC_GRPO_CONFIG (the trainer's memory need), GPU_TRAINER_MEMORY_GIB (overrides it; 0 skips
    the check), and for the KV cache estimate GPU_MODEL, GPU_INFERENCE_DTYPE, GPU_MAX_MODEL_LEN,
    GPU_MAX_CONCURRENT_ROLLOUTS.
    """
    verdict = Verdict()
    if not gpus:
        verdict.fail("nvidia-smi lists no GPU")
        return verdict
    listing = ", ".join(
        f"{g.index}: {g.name} (compute {g.compute_cap}, {g.memory_free_mib / GIB:.1f} of "
        f"{g.memory_total_mib / GIB:.1f} GiB free)"
        for g in gpus
    )
    verdict.ok(f"{len(gpus)} GPU(s): {listing}")
    driver = gpus[0].driver_version
    if driver_at_least(driver):
        verdict.ok(f"driver {driver} (the images' torch is built for CUDA 13.0: needs >= {MIN_DRIVER[0]})")
    else:
        verdict.fail(
            f"driver {driver} is older than {MIN_DRIVER[0]}: the images' torch is built for CUDA 13.0, "
            f"which needs NVIDIA driver {MIN_DRIVER[0]} or newer; upgrade the driver"
        )
    by_index = {g.index: g for g in gpus}
    topology = _flag(env, "GPU_TOPOLOGY", "auto")
    if topology not in ("auto", "one", "two"):
        verdict.fail(f"GPU_TOPOLOGY must be auto, one or two, got {topology!r}")
        return verdict
    if topology == "auto":
        topology = "two" if len(gpus) >= 2 else "one"
    verdict.topology = topology
    async_wanted = _flag(env, "GPU_ASYNC_GRPO", "on") != "off"

    if topology == "one":
        index = int(env.get("ONE_GPU") or gpus[0].index)
        gpu = by_index.get(index)
        if gpu is None:
            verdict.fail(f"ONE_GPU={index} is not one of this host's GPUs ({sorted(by_index)})")
            return verdict
        verdict.one_gpu = index
        verdict.async_grpo = False
        config = _setting(env, "GPU_ONE_GRPO_CONFIG")
        colocated = config == COLOCATED_CONFIG
        verdict.ok(
            f"topology one: GPU {index} runs the trainer ({config}"
            + (", vLLM colocated)" if colocated else ", generation in the trainer)")
        )
        if async_wanted:
            verdict.note("AsyncGRPO is skipped: TRL's AsyncGRPOTrainer needs a separate vLLM server on another GPU")
        trainer = trainer_need(env, [config])
        if colocated:
            share = COLOCATED_VLLM_SHARE * gpu.memory_total_mib / GIB
            need = None if trainer is None else MemoryNeed(trainer.gib + share, trainer.source, trainer.basis)
            what = f"the trainer and colocated vLLM ({COLOCATED_VLLM_SHARE:.2f} of the GPU)"
        else:
            need, what = trainer, "the trainer (generation included)"
        _check_free(verdict, gpu, need, what)
        return verdict

    inference_id, trainer_id = int(env.get("INFERENCE_GPU") or 0), int(env.get("TRAINER_GPU") or 1)
    missing = [
        f"{name}={i}" for name, i in (("INFERENCE_GPU", inference_id), ("TRAINER_GPU", trainer_id)) if i not in by_index
    ]
    if missing:
        verdict.fail(
            f"{', '.join(missing)} is not one of this host's GPUs ({sorted(by_index)}); "
            "set the ids in .env, or GPU_TOPOLOGY=one to run on a single GPU"
        )
        return verdict
    if inference_id == trainer_id:
        verdict.fail(
            f"INFERENCE_GPU and TRAINER_GPU are both {trainer_id}: NCCL cannot put the trainer and the "
            "vLLM server of one weight-sync group on the same GPU; give them different GPUs, or set "
            "GPU_TOPOLOGY=one to run the walkthrough on one GPU (GRPO only, no vLLM)"
        )
        return verdict
    verdict.ok(f"topology two: vLLM on GPU {inference_id}, the trainer on GPU {trainer_id} (NCCL weight sync)")
    inference, trainer = by_index[inference_id], by_index[trainer_id]
    share = vllm_share(_setting(env, "GPU_VLLM_EXTRA_ARGS"))
    _check_free(
        verdict, inference, share * inference.memory_total_mib / GIB, f"vLLM (--gpu-memory-utilization {share})"
    )
    verdict.async_grpo = async_wanted
    verdict.inference_dtype = (env.get("GPU_INFERENCE_DTYPE") or "").strip().lower() or (
        ASYNC_GRPO_INFERENCE_DTYPE if async_wanted else GRPO_INFERENCE_DTYPE
    )
    verdict.ok(
        f"vLLM serves {verdict.inference_dtype}"
        + (
            " (GPU_INFERENCE_DTYPE)"
            if env.get("GPU_INFERENCE_DTYPE")
            else " (AsyncGRPO's trainer and server are float32)"
            if async_wanted
            else " (GRPO only: its forward runs under bfloat16 autocast)"
        )
    )
    _check_kv_cache(verdict, env, share * inference.memory_total_mib / GIB, verdict.inference_dtype)
    configs = [_setting(env, "GPU_GRPO_CONFIG")] + ([_setting(env, "GPU_ASYNC_GRPO_CONFIG")] if async_wanted else [])
    _check_free(verdict, trainer, trainer_need(env, configs), "the trainer")
    if not async_wanted:
        verdict.note("AsyncGRPO is off (GPU_ASYNC_GRPO=off): only the GRPO job runs")
    elif trainer.compute_cap in FA3_CAPABILITIES:
        verdict.ok(f"GPU {trainer_id} compute capability {trainer.compute_cap}: AsyncGRPO's FA3 kernel has a build")
    else:
        verdict.fail(
            f"GPU {trainer_id} ({trainer.name}) has compute capability {trainer.compute_cap}; AsyncGRPO's "
            f"attention kernel (kernels-community/flash-attn3) is built for {' and '.join(FA3_CAPABILITIES)} "
            "only (A100, H100 class). Set GPU_ASYNC_GRPO=off to run only the GRPO job, or TRAINER_GPU "
            "to a GPU of that class"
        )
    return verdict


def _setting(env: Mapping[str, str], name: str) -> str:
    return env.get(name) or STACK_DEFAULTS[name]


def trainer_need(env: Mapping[str, str], configs: Sequence[str]) -> MemoryNeed | None:
    """The trainer GPU's memory need for the job configs it runs one after another (the largest):
    GPU_TRAINER_MEMORY_GIB when set (0: None, no check), else each config's figure; a config with no
    figure here (your own) counts the training state alone."""
    override = env.get("GPU_TRAINER_MEMORY_GIB")
    if override:
        gib = float(override)
        return MemoryNeed(gib, "set", "GPU_TRAINER_MEMORY_GIB") if gib > 0 else None
    needs = []
    for config in configs:
        if config == STACK_DEFAULTS["GPU_ASYNC_GRPO_CONFIG"]:
            needs.append(async_grpo_memory(int(_setting(env, "GPU_MAX_MODEL_LEN"))))
        else:
            needs.append(
                TRAINER_MEMORY.get(config)
                or MemoryNeed(
                    TRAINING_STATE_GIB + TRAINER_OVERHEAD_GIB,
                    "derived",
                    f"{config}: 16 bytes per parameter and the overhead, its activations not counted "
                    "(GPU_TRAINER_MEMORY_GIB sets the need)",
                )
            )
    return max(needs, key=lambda need: need.gib)


def kv_cache_tokens(vllm_gib: float, dtype: str) -> int:
    """Tokens of Qwen3-1.7B's KV cache in ``vllm_gib`` of GPU memory served in ``dtype``."""
    size = DTYPE_BYTES.get(dtype, 2)
    free = vllm_gib - QWEN3_1_7B_PARAMETERS * size / GIB**3 - VLLM_OVERHEAD_GIB
    return max(0, int(free * GIB**3 / (QWEN3_1_7B_KV_VALUES_PER_TOKEN * size)))


def _check_kv_cache(verdict: Verdict, env: Mapping[str, str], vllm_gib: float, dtype: str) -> None:
    """Whether vLLM's KV cache holds every rollout at its longest at once (else they queue and vLLM
    preempts: slower, not wrong, so a note)."""
    model = _setting(env, "GPU_MODEL")
    if model != STACK_DEFAULTS["GPU_MODEL"]:
        verdict.note(f"KV cache size not estimated for {model} (only for {STACK_DEFAULTS['GPU_MODEL']})")
        return
    tokens = kv_cache_tokens(vllm_gib, dtype)
    rollouts, length = int(_setting(env, "GPU_MAX_CONCURRENT_ROLLOUTS")), int(_setting(env, "GPU_MAX_MODEL_LEN"))
    need = rollouts * length
    what = f"vLLM's KV cache ({dtype}) holds ~{tokens:,} tokens; {rollouts} rollouts of up to {length:,} need {need:,}"
    if tokens >= need:
        verdict.ok(what)
    else:
        verdict.note(
            f"{what}: long rollouts will queue and vLLM will preempt (slower, not wrong); raise "
            "--gpu-memory-utilization (GPU_VLLM_EXTRA_ARGS), lower GPU_MAX_CONCURRENT_ROLLOUTS or "
            "GPU_MAX_MODEL_LEN, or serve bfloat16"
        )


def _check_free(verdict: Verdict, gpu: Gpu, need: MemoryNeed | float | None, what: str) -> None:
    """Whether ``gpu`` has the free memory ``need`` says (GiB, or a MemoryNeed; None: not checked)."""
    free = gpu.memory_free_mib / GIB
    if need is None:
        verdict.note(f"GPU {gpu.index}: {free:.1f} GiB free; {what}: not checked (GPU_TRAINER_MEMORY_GIB=0)")
        return
    gib, described = (need, f"~{need:.1f} GiB") if isinstance(need, float) else (need.gib, need.describe())
    if free + 1e-9 >= gib:
        verdict.ok(f"GPU {gpu.index}: {free:.1f} GiB free, {what} needs {described}")
    else:
        verdict.fail(
            f"GPU {gpu.index} ({gpu.name}) has {free:.1f} GiB free; {what} needs {described}; free the GPU, "
            "or set GPU_TRAINER_MEMORY_GIB if you know your job needs less"
        )


def query_nvidia_smi() -> str:
    """``nvidia-smi``'s answer to the pre-flight's query."""
    return subprocess.run(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def main(argv: Sequence[str] | None = None) -> int:
    """Print one line per check and ``topology=...`` lines for the caller; exit 1 on a failed check."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nvidia-smi-output", type=Path, help="read this file instead of running nvidia-smi")
    args = parser.parse_args(argv)
    try:
        text = args.nvidia_smi_output.read_text() if args.nvidia_smi_output else query_nvidia_smi()
        gpus = parse_nvidia_smi(text)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        print(f"gpu-preflight: FAIL  nvidia-smi: {error}", file=sys.stderr)
        return 1
    verdict = plan(gpus, os.environ)
    for line in verdict.lines:
        print(f"gpu-preflight: {line}", flush=True)
    if verdict.failed:
        print("gpu-preflight: stopped before starting anything (fix the FAIL lines above)", flush=True)
        return 1
    print(f"topology={verdict.topology}")
    print(f"async_grpo={'on' if verdict.async_grpo else 'off'}")
    if verdict.one_gpu is not None:
        print(f"one_gpu={verdict.one_gpu}")
    if verdict.inference_dtype is not None:
        print(f"inference_dtype={verdict.inference_dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
