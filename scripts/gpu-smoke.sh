#!/usr/bin/env bash
# One GRPO and one AsyncGRPO optimizer step on an NVIDIA host (`make gpu-smoke`). Needs two GPUs
# (vLLM on INFERENCE_GPU, the trainer on TRAINER_GPU; defaults 0 and 1), the NVIDIA container
# toolkit, and the Hugging Face Hub (Qwen3-1.7B, the FA3 kernel) unless the caches are filled.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi -L || { echo "gpu-smoke: no NVIDIA GPU here (nvidia-smi failed)" >&2; exit 1; }
export BASE_IMAGE=${BASE_IMAGE:-$(scripts/ensure-base-image.sh)}
compose=(docker compose -f compose.yaml -f compose.gpu.yaml -p "${SMOKE_PROJECT:-rlstack-gpu-smoke}")
trap '"${compose[@]}" down -v --remove-orphans' EXIT
"${compose[@]}" up --build --detach --wait --wait-timeout 1800 reasoning-gym-env inference opencode-env
"${compose[@]}" run --rm --build trainer "
  python3 -m trainer grpo --config grpo-gpu.yaml --set grpo.max_steps=1 --set output_dir=/outputs/smoke-grpo &&
  python3 -m trainer async-grpo --config async-grpo-gpu.yaml --set async_grpo.max_steps=1 \
    --set opencode.num_tasks=8 --set output_dir=/outputs/smoke-async"
echo "gpu-smoke: one GRPO step and one AsyncGRPO step completed"
