#!/usr/bin/env bash
# GPU pre-flight for `make up-gpu` and `make gpu-smoke` (source it, then call `gpu_preflight`).
# Runs trainer/trainer/gpu/preflight.py in the base image with `--gpus all` (which also proves the
# NVIDIA container toolkit works), prints its verdict, and sets for the caller:
#   gpu_compose   the compose command for the topology it found (an array)
#   gpu_services  the long-running services to start (one GPU: neither `inference` nor
#                 `opencode-env`, which only the two-GPU AsyncGRPO job uses)
# and exports ONE_GPU (one GPU), GPU_ASYNC_GRPO and GPU_INFERENCE_DTYPE (the dtype vLLM serves in:
# float32 when AsyncGRPO runs on it, else bfloat16, unless set). Settings come from the environment,
# then .env.
# Returns non-zero, having said why, when the host cannot run the GPU stack.
# GPU_PREFLIGHT_NVIDIA_SMI_OUTPUT=FILE (tests of these scripts on a host without GPUs): read that
# file as nvidia-smi's answer instead of asking the GPUs.

GPU_PREFLIGHT_VARIABLES=(GPU_TOPOLOGY INFERENCE_GPU TRAINER_GPU ONE_GPU GPU_ASYNC_GRPO GPU_VLLM_EXTRA_ARGS
                         GPU_TRAINER_MEMORY_GIB GPU_MODEL GPU_INFERENCE_DTYPE GPU_MAX_MODEL_LEN
                         GPU_MAX_CONCURRENT_ROLLOUTS GPU_GRPO_CONFIG GPU_ONE_GRPO_CONFIG GPU_ASYNC_GRPO_CONFIG)

gpu_preflight() {
  local project=${1:-}
  command -v docker >/dev/null || { echo "gpu-preflight: FAIL  docker is not installed (scripts/provision-docker.sh)"; return 1; }
  local base=${BASE_IMAGE:-$(scripts/ensure-base-image.sh)}
  local args=(--rm -v "$PWD/trainer/trainer/gpu/preflight.py:/gpu_preflight.py:ro") script_args=()
  if [ -n "${GPU_PREFLIGHT_NVIDIA_SMI_OUTPUT:-}" ]; then
    args+=(-v "$(realpath "$GPU_PREFLIGHT_NVIDIA_SMI_OUTPUT"):/nvidia-smi.csv:ro")
    script_args=(--nvidia-smi-output /nvidia-smi.csv)
  else
    args+=(--gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility)
  fi
  [ -f .env ] && args+=(--env-file .env)
  local name
  for name in "${GPU_PREFLIGHT_VARIABLES[@]}"; do
    [ -n "${!name+x}" ] && args+=(-e "$name")
  done
  local out
  if ! out=$(docker run "${args[@]}" "$base" python3 /gpu_preflight.py "${script_args[@]}" 2>&1); then
    echo "$out"
    if ! grep -q '^gpu-preflight:' <<<"$out"; then
      echo "gpu-preflight: FAIL  \`docker run --gpus all\` did not start: the NVIDIA driver and the NVIDIA" \
           "container toolkit (nvidia-ctk runtime configure --runtime=docker) are needed"
    fi
    return 1
  fi
  grep '^gpu-preflight:' <<<"$out"
  local topology async one dtype
  topology=$(sed -n 's/^topology=//p' <<<"$out")
  async=$(sed -n 's/^async_grpo=//p' <<<"$out")
  one=$(sed -n 's/^one_gpu=//p' <<<"$out")
  dtype=$(sed -n 's/^inference_dtype=//p' <<<"$out")
  export GPU_ASYNC_GRPO=$async
  [ -n "$dtype" ] && export GPU_INFERENCE_DTYPE=$dtype
  gpu_compose=(docker compose -f compose.yaml -f compose.gpu.yaml)
  gpu_services=(reasoning-gym-env inference opencode-env dashboard)
  if [ "$topology" = one ]; then
    export ONE_GPU=$one
    gpu_compose+=(-f compose.gpu-one.yaml)
    gpu_services=(reasoning-gym-env dashboard)
  fi
  [ -n "$project" ] && gpu_compose+=(-p "$project")
  echo "gpu-preflight: compose: ${gpu_compose[*]}"
}
