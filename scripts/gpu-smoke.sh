#!/usr/bin/env bash
# `make gpu-smoke`: the GPU path end to end, unattended, on an NVIDIA host. One verdict line per
# stage (PASS / FAIL / SKIP), each stage under a timeout, a diagnosis line and the log file on a
# failure; exit 1 if any stage failed. Stages: pre-flight, images, services healthy, NCCL group
# formed, one GRPO step, weights reached vLLM (probe logprobs after the sync), one AsyncGRPO step.
# One GPU: GRPO with vLLM colocated; the NCCL, probe and AsyncGRPO stages are skipped.
# Needs the Hugging Face Hub for Qwen3-1.7B and the FA3 kernel unless the caches hold them; the
# caches (the shared hf-cache volume) are kept. Logs: $SMOKE_LOG_DIR (default ./gpu-smoke-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-preflight.sh
export BASE_IMAGE=${BASE_IMAGE:-$(scripts/ensure-base-image.sh)}
logs=${SMOKE_LOG_DIR:-gpu-smoke-logs}
mkdir -p "$logs"
failures=0

verdict() {  # STAGE PASS|FAIL|SKIP DETAIL
  printf 'gpu-smoke: %-22s %-4s  %s\n' "$1" "$2" "$3"
  [ "$2" = FAIL ] && failures=$((failures + 1))
  return 0
}

diagnose() {  # LOG PATTERN HINT
  local seen
  seen=$(grep -E -m 3 "$2" "$1" | cut -c1-240)
  echo "gpu-smoke:   diagnosis: $3"
  [ -n "$seen" ] && sed 's/^/gpu-smoke:   log: /' <<<"$seen"
  echo "gpu-smoke:   full log: $1"
}

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

# One large step (learning rate 1e-4), so that the probe sees the weights move and then arrive.
grpo="python3 -m trainer grpo --config \"\$GRPO_CONFIG\" --set grpo.max_steps=1 --set grpo.learning_rate=1e-4
  --set eval.before_after=false --set output_dir=/outputs/smoke-grpo"
timeout "${SMOKE_STEP_TIMEOUT_S:-1800}" "${compose[@]}" run --rm --no-deps trainer "$grpo" >"$logs/grpo.log" 2>&1
grpo_rc=$?
if [ "${#gpu_services[@]}" = 4 ]; then
  if grep -q "weight sync: NCCL group with the vLLM server" "$logs/grpo.log"; then
    verdict "NCCL group" PASS "trainer and vLLM joined the weight-sync group"
  else
    verdict "NCCL group" FAIL "the trainer did not join vLLM's NCCL group"
    diagnose "$logs/grpo.log" "NCCL|init_communicator|Connection|timed out" \
      "vLLM connects back to TRAINER_IP: check NCCL_SOCKET_IFNAME (eth0 in the containers), GPU_SUBNET, and try NCCL_P2P_DISABLE=1 / NCCL_SHM_DISABLE=1"
  fi
else
  verdict "NCCL group" SKIP "one GPU: vLLM is colocated in the trainer"
fi
if [ "$grpo_rc" = 0 ] && grep -q "finished 1 optimizer steps" "$logs/grpo.log"; then
  verdict "GRPO step" PASS "one optimizer step through reasoning-gym-env ($(grep -m1 -o 'step 1/1.*' "$logs/grpo.log" | cut -c1-120))"
else
  verdict "GRPO step" FAIL "exit $grpo_rc$([ "$grpo_rc" = 124 ] && echo ' (timed out)')"
  diagnose "$logs/grpo.log" "Error|error|out of memory|Traceback" \
    "see the log; CUDA out of memory: lower per_device_train_batch_size or GPU_VLLM_EXTRA_ARGS"
fi
if [ "${#gpu_services[@]}" = 4 ]; then
  if grep -q "weights reached vLLM (the final step had moved them" "$logs/grpo.log"; then
    verdict "weights reached vLLM" PASS "$(grep -m1 -o 'max |vLLM - trainer|.*after' "$logs/grpo.log")"
  else
    verdict "weights reached vLLM" FAIL "the probe's logprobs on vLLM did not follow the trained weights"
    diagnose "$logs/grpo.log" "weight sync: probe|MISMATCH" \
      "a bfloat16 server against the float32 trainer differs by ~0.1 (GPU_INFERENCE_DTYPE=float32), else the sync is broken"
  fi
else
  verdict "weights reached vLLM" SKIP "one GPU: colocated vLLM shares the trainer's process"
fi

if [ "$GPU_ASYNC_GRPO" != on ]; then
  verdict "AsyncGRPO step" SKIP "$([ "${#gpu_services[@]}" = 4 ] && echo 'GPU_ASYNC_GRPO=off' || echo 'one GPU: AsyncGRPO needs two')"
else
  async="python3 -m trainer async-grpo --config \"\$ASYNC_GRPO_CONFIG\" --set async_grpo.max_steps=1
    --set opencode.num_tasks=8 --set output_dir=/outputs/smoke-async"
  timeout "${SMOKE_STEP_TIMEOUT_S:-1800}" "${compose[@]}" run --rm --no-deps trainer "$async" >"$logs/async-grpo.log" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && grep -q "finished 1 optimizer steps" "$logs/async-grpo.log"; then
    verdict "AsyncGRPO step" PASS "one optimizer step on OpenCode rollouts"
  else
    verdict "AsyncGRPO step" FAIL "exit $rc$([ "$rc" = 124 ] && echo ' (timed out)')"
    diagnose "$logs/async-grpo.log" "Error|error|flash-attn3|kernels|NCCL|503|Traceback" \
      "FA3 kernel offline (PRECACHE_FA3=1 at build), compute capability, NCCL, or opencode-env capacity"
  fi
fi
[ "$failures" = 0 ] && echo "gpu-smoke: all stages passed" || echo "gpu-smoke: $failures stage(s) failed (logs: $logs)"
[ "$failures" = 0 ]
