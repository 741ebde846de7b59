# The training jobs `make gpu-smoke` runs in the trainer container, and where each leaves its facts
# (sourced by scripts/gpu-smoke.sh, and by the tests, which run the jobs through the same entrypoint
# on CPU). The trainer runs its command with /bin/sh -ec, where a newline ends a command: each job
# is one line. $GRPO_CONFIG and $ASYNC_GRPO_CONFIG expand in the container.
SMOKE_GRPO_OUTPUT=/outputs/smoke-grpo
SMOKE_ASYNC_GRPO_OUTPUT=/outputs/smoke-async
# GRPO: one large step (learning rate 1e-4, no warm-up, so the step's rate is not 0) for the probe to
# see the weights move and then arrive.
SMOKE_GRPO_JOB="python3 -m trainer grpo --config \"\$GRPO_CONFIG\" --set grpo.max_steps=1 --set grpo.learning_rate=1e-4 --set grpo.warmup_steps=0 --set grpo.logging_steps=1 --set eval.before_after=false --set output_dir=$SMOKE_GRPO_OUTPUT"
SMOKE_ASYNC_GRPO_JOB="python3 -m trainer async-grpo --config \"\$ASYNC_GRPO_CONFIG\" --set async_grpo.max_steps=1 --set opencode.num_tasks=8 --set output_dir=$SMOKE_ASYNC_GRPO_OUTPUT"
