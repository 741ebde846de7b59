"""GPU pre-flight decisions on faked ``nvidia-smi`` output (no GPU needed)."""

import subprocess
import sys
from pathlib import Path

import pytest
from trainer.gpu import preflight as gpu_preflight
from trainer.gpu.preflight import parse_nvidia_smi, plan, vllm_share

A100_40 = "0, NVIDIA A100-SXM4-40GB, 8.0, 40960, 40339, 580.82.07\n"
TWO_H100 = (
    "0, NVIDIA H100 80GB HBM3, 9.0, 81559, 81000, 580.95.05\n1, NVIDIA H100 80GB HBM3, 9.0, 81559, 81000, 580.95.05\n"
)
TWO_L40S = "0, NVIDIA L40S, 8.9, 46068, 45500, 580.95.05\n1, NVIDIA L40S, 8.9, 46068, 45500, 580.95.05\n"


def verdict_of(smi: str, **env: str) -> gpu_preflight.Verdict:
    return plan(parse_nvidia_smi(smi), env)


def failures(verdict: gpu_preflight.Verdict) -> list[str]:
    return [line for line in verdict.lines if line.startswith("FAIL")]


def test_two_h100_run_both_jobs_on_separate_gpus():
    verdict = verdict_of(TWO_H100)
    assert not verdict.failed, verdict.lines
    assert verdict.topology == "two"
    assert verdict.async_grpo
    assert any("vLLM on GPU 0, the trainer on GPU 1" in line for line in verdict.lines)


def test_one_a100_runs_the_walkthrough_without_vllm_and_skips_async_grpo():
    verdict = verdict_of(A100_40, INFERENCE_GPU="0", TRAINER_GPU="1")  # .env.example's ids do not apply
    assert not verdict.failed, verdict.lines
    assert verdict.topology == "one"
    assert verdict.one_gpu == 0
    assert not verdict.async_grpo
    assert any("AsyncGRPO is skipped" in line for line in verdict.lines)


def test_same_gpu_for_vllm_and_trainer_is_refused_with_the_reason():
    verdict = verdict_of(TWO_H100, INFERENCE_GPU="1", TRAINER_GPU="1")
    assert verdict.failed
    assert "NCCL cannot put the trainer and the vLLM server" in failures(verdict)[0]
    assert "GPU_TOPOLOGY=one" in failures(verdict)[0]


def test_gpu_ids_that_do_not_exist_are_named():
    verdict = verdict_of(TWO_H100, TRAINER_GPU="3")
    assert "TRAINER_GPU=3 is not one of this host's GPUs ([0, 1])" in failures(verdict)[0]


def test_old_driver_fails_with_the_cuda_13_reason():
    verdict = verdict_of(TWO_H100.replace("580.95.05", "550.127.05"))
    assert any("driver 550.127.05 is older than 580" in line and "CUDA 13.0" in line for line in failures(verdict))


def test_async_grpo_on_a_gpu_without_an_fa3_build_fails_unless_turned_off():
    verdict = verdict_of(TWO_L40S, GPU_TRAINER_MEMORY_GIB="40")  # a measured need that fits
    assert verdict.failed
    message = failures(verdict)[0]
    assert "compute capability 8.9" in message
    assert "GPU_ASYNC_GRPO=off" in message
    off = verdict_of(TWO_L40S, GPU_ASYNC_GRPO="off", GPU_TRAINER_MEMORY_GIB="40")
    assert not off.failed
    assert not off.async_grpo


def test_free_memory_is_checked_per_role():
    busy = TWO_H100.replace("1, NVIDIA H100 80GB HBM3, 9.0, 81559, 81000", "1, NVIDIA H100 80GB HBM3, 9.0, 81559, 9000")
    verdict = verdict_of(busy)
    assert any(
        line.startswith("FAIL  GPU 1") and "the trainer needs ~47.6 GiB, derived" in line for line in verdict.lines
    )
    small_vllm_share = verdict_of(
        TWO_H100.replace("81559, 81000, 580.95.05\n1", "81559, 30000, 580.95.05\n1"),
        GPU_VLLM_EXTRA_ARGS="--gpu-memory-utilization 0.3",
    )
    assert not small_vllm_share.failed, small_vllm_share.lines  # 0.3 x 79.6 GiB = 23.9 GiB <= 29.3 free


def test_the_trainers_need_is_the_published_peak_for_the_walkthrough_and_derived_for_the_others():
    walkthrough = gpu_preflight.TRAINER_MEMORY["grpo-walkthrough.yaml"]
    assert (walkthrough.gib, walkthrough.source) == (38.0, "published")
    # The derivation, calibrated on that peak, gives the walkthrough's own shapes exactly 38 GiB.
    assert gpu_preflight.grpo_memory(1, 256).gib == pytest.approx(38.0)
    for config in ("grpo-gpu.yaml", "grpo-gpu-one.yaml"):
        assert gpu_preflight.TRAINER_MEMORY[config].source == "derived"
    # AsyncGRPO's rows grow with the token budget (TRL's default: the server's max_model_len).
    assert gpu_preflight.async_grpo_memory(32768).gib > gpu_preflight.async_grpo_memory(8192).gib
    two_a100_40 = A100_40 + A100_40.replace("0, NVIDIA", "1, NVIDIA")
    both = verdict_of(two_a100_40)
    assert any("the trainer needs ~47.6 GiB" in line for line in failures(both))  # GRPO's is the larger
    short = verdict_of(two_a100_40, GPU_ASYNC_GRPO="off", GPU_GRPO_CONFIG="my-grpo.yaml")
    assert not short.failed, short.lines
    assert any("my-grpo.yaml: 16 bytes per parameter and the overhead" in line for line in short.lines)
    measured = verdict_of(TWO_H100, GPU_TRAINER_MEMORY_GIB="70")
    assert any("the trainer needs ~70.0 GiB, set: GPU_TRAINER_MEMORY_GIB" in line for line in measured.lines)
    unchecked = verdict_of(TWO_H100, GPU_TRAINER_MEMORY_GIB="0")
    assert any(line.startswith("note  GPU 1") and "not checked" in line for line in unchecked.lines)


def test_vllm_serves_float32_for_async_grpo_and_bfloat16_for_grpo_alone():
    assert verdict_of(TWO_H100).inference_dtype == "float32"
    assert verdict_of(TWO_H100, GPU_ASYNC_GRPO="off").inference_dtype == "bfloat16"
    assert verdict_of(TWO_H100, GPU_INFERENCE_DTYPE="bfloat16").inference_dtype == "bfloat16"
    assert verdict_of(A100_40).inference_dtype is None  # one GPU: no vLLM server


def test_one_gpu_needs_room_for_the_trainer_and_colocated_vllm():
    a10g = "0, NVIDIA A10G, 8.6, 23028, 22000, 580.95.05\n"
    walkthrough = verdict_of(a10g)  # the default on one GPU: generation in the trainer
    assert "the trainer (generation included) needs ~38.0 GiB, published" in failures(walkthrough)[0]
    assert not verdict_of(A100_40).failed  # the walkthrough's own GPU
    colocated = verdict_of(A100_40, GPU_ONE_GRPO_CONFIG="grpo-gpu-one.yaml")
    assert "colocated vLLM" in failures(colocated)[0]  # ~40 GiB derived + 0.25 x 40 GiB
    h100 = verdict_of(TWO_H100, GPU_TOPOLOGY="one", GPU_ONE_GRPO_CONFIG="grpo-gpu-one.yaml")
    assert not h100.failed, h100.lines


def test_forced_topology_and_bad_values():
    assert verdict_of(TWO_H100, GPU_TOPOLOGY="one", ONE_GPU="1").one_gpu == 1
    assert "GPU_TOPOLOGY must be" in failures(verdict_of(TWO_H100, GPU_TOPOLOGY="three"))[0]
    assert failures(verdict_of("")) == ["FAIL  nvidia-smi lists no GPU"]


@pytest.mark.parametrize(
    "flags, share",
    [("", 0.9), ("--gpu-memory-utilization 0.5", 0.5), ("--enforce-eager --gpu-memory-utilization=0.4", 0.4)],
)
def test_vllm_share_read_from_the_extra_flags(flags, share):
    assert vllm_share(flags) == share


def test_malformed_nvidia_smi_output_is_an_error():
    with pytest.raises(ValueError, match="unexpected nvidia-smi row"):
        parse_nvidia_smi("0, NVIDIA A100, 8.0\n")


def test_script_prints_the_verdict_and_the_topology_for_the_shell(tmp_path):
    smi = tmp_path / "smi.csv"
    smi.write_text(A100_40)
    script = Path(gpu_preflight.__file__)
    ok = subprocess.run(
        [sys.executable, str(script), "--nvidia-smi-output", str(smi)],
        capture_output=True,
        text=True,
        env={"GPU_TOPOLOGY": "auto"},
    )
    assert ok.returncode == 0, ok.stderr
    assert "topology=one" in ok.stdout.splitlines()
    assert "one_gpu=0" in ok.stdout.splitlines()
    smi.write_text(TWO_H100)
    bad = subprocess.run(
        [sys.executable, str(script), "--nvidia-smi-output", str(smi)],
        capture_output=True,
        text=True,
        env={"INFERENCE_GPU": "0", "TRAINER_GPU": "0"},
    )
    assert bad.returncode == 1
    assert "topology=" not in bad.stdout
    assert "stopped before starting anything" in bad.stdout


def test_the_kv_cache_estimate_says_whether_the_rollouts_in_flight_fit():
    fits = verdict_of(TWO_H100)  # 0.9 of 79.6 GiB in float32: ~296k tokens for 8 x 32,768
    assert any(line.startswith("ok    vLLM's KV cache (float32) holds ~296,") for line in fits.lines)
    two_a100_40 = A100_40 + A100_40.replace("0, NVIDIA", "1, NVIDIA")
    short = verdict_of(two_a100_40, GPU_TRAINER_MEMORY_GIB="30")
    assert not short.failed, short.lines  # slower, not wrong: a note
    note = next(line for line in short.lines if "KV cache" in line)
    assert note.startswith("note  vLLM's KV cache (float32) holds ~129,164 tokens")
    assert "8 rollouts of up to 32,768 need 262,144: long rollouts will queue" in note
    bf16 = verdict_of(two_a100_40, GPU_ASYNC_GRPO="off")
    assert any(line.startswith("ok    vLLM's KV cache (bfloat16)") for line in bf16.lines)
    other = verdict_of(TWO_H100, GPU_MODEL="Qwen/Qwen3-8B")
    assert any("not estimated for Qwen/Qwen3-8B" in line for line in other.lines)
