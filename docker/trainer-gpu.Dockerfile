# The trainer on NVIDIA GPU hosts: CUDA torch, vLLM 0.31 (TRL's NCCL weight transfer imports it),
# TRL 1.16 and the env clients. Build context: the repository root. The first layers are the
# inference-gpu image's, so both images share them (build cache and disk).
ARG BASE_IMAGE=python:3.11-slim-bookworm
# uv (pinned) installs the locked wheels: parallel downloads, unpacking and byte-compilation (pip
# took most of a cold build). It lives in its own stage, bind-mounted where it is used, so no image
# ships it; its download cache is a BuildKit cache mount, so rebuilds after a lock change reuse wheels.
# Our own packages install with --no-cache: uv keys a directory's cached build on its pyproject.toml.
FROM ${BASE_IMAGE} AS uv
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir -q uv==0.13.9

FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ libc6-dev libnuma1 \
 && { python3 -c "import os,sys,sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
      || apt-get install -y --no-install-recommends python3-dev; } \
 && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy
RUN python3 -m venv "$VIRTUAL_ENV"
COPY docker/requirements/inference-gpu.lock /tmp/inference-gpu.lock
# `vllm --version` needs a GPU to infer the device; importing the package does not.
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    /opt/uv/bin/uv pip install --no-deps -r /tmp/inference-gpu.lock && python3 -c "import vllm; print(vllm.__version__)"
COPY docker/requirements/trainer-gpu.lock /tmp/trainer-gpu.lock
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    /opt/uv/bin/uv pip install --no-deps -r /tmp/trainer-gpu.lock
COPY services/reasoning_gym_env/client /src/reasoning-gym-env-client
COPY services/opencode_env/client /src/opencode-env-client
COPY services/inference/client /src/inference-client
COPY trainer /src/trainer
# What each GPU path imports: NCCL weight transfer (server mode, AsyncGRPO) and vllm.LLM in process
# (grpo-gpu-one.yaml's colocate mode); tests/container/test_gpu_path.py also checks vLLM's own
# requirements against what this image holds.
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    /opt/uv/bin/uv pip install --no-cache --no-deps /src/reasoning-gym-env-client /src/opencode-env-client /src/inference-client /src/trainer \
 && python3 -c "import trainer.jobs.grpo, trainer.jobs.async_grpo, trainer.gpu.nccl_probe, trl.experimental.async_grpo.weight_transfer, trl.generation.vllm_client, trl.generation.vllm_generation, vllm.distributed.weight_transfer.nccl_engine, vllm.distributed.weight_transfer.packed_tensor, vllm.utils.network_utils, kernels; from vllm import LLM, SamplingParams"

# The FA3 kernel is cached outside HF_HOME (KERNELS_CACHE): the hf-cache volume mounted on
# /cache/huggingface would hide a kernel baked in there as soon as the volume has content.
ENV PYTHONUNBUFFERED=1 HF_HOME=/cache/huggingface KERNELS_CACHE=/opt/kernels-cache TRACKIO_DIR=/outputs/trackio \
    TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
# AsyncGRPO loads the FA3 attention kernel from the Hugging Face Hub on first use; PRECACHE_FA3=1
# downloads it at build time (needs the Hub, no GPU: trainer/trainer/gpu/precache_fa3.py) so
# training starts offline.
ARG PRECACHE_FA3=0
RUN useradd --system --uid 10001 --home-dir /home/app --create-home app \
 && mkdir -p /outputs /weights /cache/huggingface "$KERNELS_CACHE" && chown -R app:app /outputs /weights /cache "$KERNELS_CACHE" \
 && if [ "$PRECACHE_FA3" = 1 ]; then \
      su app -s /bin/sh -c "/opt/venv/bin/python3 -m trainer.gpu.precache_fa3"; \
    fi
USER app
WORKDIR /home/app
ENTRYPOINT ["python3", "-m", "trainer"]
CMD ["grpo", "--config", "grpo-gpu.yaml"]
