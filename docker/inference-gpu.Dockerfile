# Real vLLM on NVIDIA GPUs (Compose: `make up-gpu`). Build context: the repository root.
# The CUDA runtime comes with the torch/nvidia wheels; the host needs the NVIDIA driver and the
# NVIDIA container toolkit.
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
COPY services/inference/server /src/inference-server
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    /opt/uv/bin/uv pip install --no-cache --no-deps /src/inference-server && python3 -c "import rlstack_inference, vllm"

ENV PYTHONUNBUFFERED=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_SERVER_DEV_MODE=1 \
    VLLM_CACHE_ROOT=/cache/vllm TORCHINDUCTOR_CACHE_DIR=/cache/inductor HF_HOME=/cache/huggingface \
    MODEL=Qwen/Qwen3-1.7B WEIGHT_TRANSFER_BACKEND=nccl
# Every cache folder exists and belongs to `app` in the image: a fresh named volume mounted on one
# of them (compose.gpu.yaml mounts hf-cache on /cache/huggingface) takes its owner from here.
RUN useradd --system --uid 10001 --home-dir /home/app --create-home app \
 && mkdir -p /models /cache/huggingface /cache/vllm /cache/inductor && chown -R app:app /models /cache
USER app
WORKDIR /home/app
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=900s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
CMD ["python3", "-m", "rlstack_inference.serve"]
