#!/usr/bin/env bash
# `make gpu-smoke`: the GPU path end to end, unattended, on an NVIDIA host. One verdict line per
# stage (PASS / FAIL / SKIP), each stage under a timeout, a diagnosis line and the log file on a
# failure; exit 1 if any stage failed. Stages: isolation, pre-flight, images, services healthy, NCCL
# group formed, one GRPO step, weights reached vLLM (probe logprobs after the sync), one AsyncGRPO
# step. One GPU: GRPO only; the NCCL, probe and AsyncGRPO stages are skipped.
# The verdicts also go to $SMOKE_LOG_DIR/verdicts.json ({"stages": [{stage, verdict, detail}],
# "failures": N}); the step stages are decided from what the jobs wrote (trainer.gpu.smoke_report),
# not from their log lines.
# It runs beside a live `make up-gpu` stack: its own Compose project (rlstack-gpu-smoke), subnet
# (SMOKE_GPU_SUBNET, 172.29.0.0/24) and trainer address, ports the kernel picks; it refuses up front
# when those are taken (and the pre-flight fails when the GPUs lack free memory).
# Needs the Hugging Face Hub for Qwen3-1.7B unless the cache holds it, and on two GPUs for the FA3
# kernel the trainer image fetches at build time (one GPU builds without it); the caches (the shared
# hf-cache volume) are kept. Logs: $SMOKE_LOG_DIR (default ./gpu-smoke-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-preflight.sh
source scripts/gpu-smoke-jobs.sh
export BASE_IMAGE=${BASE_IMAGE:-$(scripts/ensure-base-image.sh)}
logs=${SMOKE_LOG_DIR:-gpu-smoke-logs}
mkdir -p "$logs"
project=rlstack-gpu-smoke
export GPU_SUBNET=${SMOKE_GPU_SUBNET:-172.29.0.0/24}
export TRAINER_IP=${SMOKE_TRAINER_IP:-${GPU_SUBNET%.*/*}.10}
export REASONING_GYM_ENV_PORT=0 INFERENCE_PORT=0 OPENCODE_ENV_PORT=0 DASHBOARD_PORT=0
failures=0
stages=()

json_string() {
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/ }
  printf '"%s"' "$s"
}

verdict() {  # STAGE PASS|FAIL|SKIP DETAIL
  printf 'gpu-smoke: %-22s %-4s  %s\n' "$1" "$2" "$3"
  [ "$2" = FAIL ] && failures=$((failures + 1))
  stages+=("{\"stage\": $(json_string "$1"), \"verdict\": $(json_string "$2"), \"detail\": $(json_string "$3")}")
  local IFS=,
  printf '{"stages": [%s], "failures": %d}\n' "${stages[*]}" "$failures" >"$logs/verdicts.json"
  return 0
}

diagnose() {  # LOG PATTERN HINT
  local seen
  seen=$(grep -E -m 3 "$2" "$1" | cut -c1-240)
  echo "gpu-smoke:   diagnosis: $3"
  [ -n "$seen" ] && sed 's/^/gpu-smoke:   log: /' <<<"$seen"
  echo "gpu-smoke:   full log: $1"
}

facts() {  # OUTPUT_DIR: what the job left there, as key=value lines (trainer.gpu.smoke_report)
  "${compose[@]}" run --rm --no-deps --entrypoint python3 trainer -m trainer.gpu.smoke_report "$1" 2>/dev/null
}

fact() {  # FACTS KEY
  sed -n "s/^$2=//p" <<<"$1"
}

: >"$logs/verdicts.json"
running=$(docker ps -q --filter "label=com.docker.compose.project=$project")
taken=$(docker network ls -q | xargs -r docker network inspect --format \
  '{{.Name}} {{range .IPAM.Config}}{{.Subnet}} {{end}}' 2>/dev/null | grep -F " $GPU_SUBNET " | grep -v "^${project}_" | cut -d' ' -f1)
if [ -n "$running" ]; then
  verdict isolation FAIL "another gpu-smoke runs (docker compose -p $project ps); wait for it or stop it"
  exit 1
elif [ -n "$taken" ]; then
  verdict isolation FAIL "subnet $GPU_SUBNET is taken by network $taken: set SMOKE_GPU_SUBNET to a free /24"
  exit 1
fi
verdict isolation PASS "project $project, subnet $GPU_SUBNET, trainer $TRAINER_IP, host ports picked by the kernel"

if ! gpu_preflight rlstack-gpu-smoke >"$logs/preflight.log" 2>&1; then
  cat "$logs/preflight.log"
  verdict pre-flight FAIL "the host cannot run the GPU stack (FAIL lines above)"
  exit 1
fi
grep -v '^gpu-preflight: compose' "$logs/preflight.log"
verdict pre-flight PASS "topology $([ "${#gpu_services[@]}" = 4 ] && echo two || echo one), AsyncGRPO $GPU_ASYNC_GRPO"
compose=("${gpu_compose[@]}")
trap '"${compose[@]}" down --remove-orphans >/dev/null 2>&1' EXIT  # volumes (caches) are kept

if timeout "${SMOKE_BUILD_TIMEOUT_S:-5400}" "${compose[@]}" build "${gpu_services[@]}" trainer >"$logs/build.log" 2>&1; then
  verdict images PASS "built"
else
  verdict images FAIL "docker compose build failed or timed out"
  diagnose "$logs/build.log" "ERROR|error:" "a build step failed (network for pip / the Hub with PRECACHE_FA3=1?)"
  exit 1
fi

if timeout "${SMOKE_SERVICES_TIMEOUT_S:-1800}" "${compose[@]}" up --detach --wait --wait-timeout \
     "${SMOKE_SERVICES_TIMEOUT_S:-1800}" "${gpu_services[@]}" >"$logs/services.log" 2>&1; then
  verdict services PASS "${gpu_services[*]} healthy"
else
  "${compose[@]}" ps --all >>"$logs/services.log" 2>&1
  "${compose[@]}" logs --no-color --tail 40 "${gpu_services[@]}" >>"$logs/services.log" 2>&1
  verdict services FAIL "did not start, or not healthy within ${SMOKE_SERVICES_TIMEOUT_S:-1800} s"
  diagnose "$logs/services.log" "Error|error|CUDA out of memory|not writable|401|403" \
    "inference: model download (HF_TOKEN, HF_HUB_OFFLINE=1 with an empty cache), GPU memory (GPU_VLLM_EXTRA_ARGS)"
  exit 1
fi

timeout "${SMOKE_STEP_TIMEOUT_S:-1800}" "${compose[@]}" run --rm --no-deps trainer "$SMOKE_GRPO_JOB" >"$logs/grpo.log" 2>&1
grpo_rc=$?
grpo_facts=$(facts "$SMOKE_GRPO_OUTPUT")
if [ "${#gpu_services[@]}" = 4 ]; then
  if [ "$(fact "$grpo_facts" nccl_group)" = formed ]; then
    verdict "NCCL group" PASS "trainer and vLLM joined the weight-sync group"
  else
    verdict "NCCL group" FAIL "the trainer did not join vLLM's NCCL group"
    diagnose "$logs/grpo.log" "NCCL|init_communicator|Connection|timed out" \
      "vLLM connects back to TRAINER_IP: check NCCL_SOCKET_IFNAME (eth0 in the containers), SMOKE_GPU_SUBNET, and try NCCL_P2P_DISABLE=1 / NCCL_SHM_DISABLE=1"
  fi
else
  verdict "NCCL group" SKIP "one GPU: no separate vLLM server"
fi
if [ "$grpo_rc" = 0 ] && [ "$(fact "$grpo_facts" steps)" = 1 ]; then
  verdict "GRPO step" PASS "one optimizer step through reasoning-gym-env"
else
  verdict "GRPO step" FAIL "exit $grpo_rc$([ "$grpo_rc" = 124 ] && echo ' (timed out)'), $(fact "$grpo_facts" steps) steps"
  diagnose "$logs/grpo.log" "Error|error|out of memory|Traceback" \
    "see the log; CUDA out of memory: lower per_device_train_batch_size or GPU_VLLM_EXTRA_ARGS"
fi
if [ "${#gpu_services[@]}" = 4 ]; then
  gaps="max |vLLM - trainer| $(fact "$grpo_facts" gap_before) before the final sync, $(fact "$grpo_facts" gap_after) after"
  if [ "$(fact "$grpo_facts" weights_reached)" = true ]; then
    verdict "weights reached vLLM" PASS "$gaps"
  elif [ "$(fact "$grpo_facts" weights_moved)" = false ]; then
    verdict "weights reached vLLM" FAIL "not proven: the step did not move the weights ($gaps)"
    if [ "$(fact "$grpo_facts" zero_std_groups)" = 1 ]; then
      echo "gpu-smoke:   diagnosis: every GRPO group of the step scored alike (no learning signal): run the smoke again"
    else
      diagnose "$logs/grpo.log" "weight sync: probe|learning_rate" "the step's learning rate or gradient was zero"
    fi
  else
    verdict "weights reached vLLM" FAIL "the probe's logprobs on vLLM did not follow the trained weights ($gaps)"
    diagnose "$logs/grpo.log" "weight sync: probe|MISMATCH" \
      "the gap after the sync exceeds the tolerance for the dtype the trainer was told the server serves (TRAINER_INFERENCE__DTYPE): a dtype mismatch, else weights that did not arrive"
  fi
else
  verdict "weights reached vLLM" SKIP "one GPU: no separate vLLM server"
fi

if [ "$GPU_ASYNC_GRPO" != on ]; then
  verdict "AsyncGRPO step" SKIP "$([ "${#gpu_services[@]}" = 4 ] && echo 'GPU_ASYNC_GRPO=off' || echo 'one GPU: AsyncGRPO needs two')"
else
  timeout "${SMOKE_STEP_TIMEOUT_S:-1800}" "${compose[@]}" run --rm --no-deps trainer "$SMOKE_ASYNC_GRPO_JOB" \
    >"$logs/async-grpo.log" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && [ "$(fact "$(facts "$SMOKE_ASYNC_GRPO_OUTPUT")" steps)" = 1 ]; then
    verdict "AsyncGRPO step" PASS "one optimizer step on OpenCode rollouts"
  else
    verdict "AsyncGRPO step" FAIL "exit $rc$([ "$rc" = 124 ] && echo ' (timed out)')"
    diagnose "$logs/async-grpo.log" "Error|error|flash-attn3|kernels|NCCL|503|Traceback" \
      "FA3 kernel offline (PRECACHE_FA3=1 at build), compute capability, NCCL, or opencode-env capacity"
  fi
fi
[ "$failures" = 0 ] && echo "gpu-smoke: all stages passed" || echo "gpu-smoke: $failures stage(s) failed (logs: $logs)"
[ "$failures" = 0 ]
