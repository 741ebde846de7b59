#!/usr/bin/env bash
# `make up-gpu`: the GPU pre-flight, then the stack for the topology it found, then the training job.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-preflight.sh
gpu_preflight
"${gpu_compose[@]}" up --build --detach --wait "${gpu_services[@]}"
make --no-print-directory urls
"${gpu_compose[@]}" up --build --no-deps --no-log-prefix trainer
code=$("${gpu_compose[@]}" ps --all --format '{{.ExitCode}}' trainer)
[ "$code" = 0 ] || { echo "training job failed (exit $code): docker compose logs trainer"; exit 1; }
