# Real vLLM on NVIDIA GPUs (Compose: `make up-gpu`). Build context: the repository root.
# The CUDA runtime comes with the torch/nvidia wheels; the host needs the NVIDIA driver and the
# NVIDIA container toolkit.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ libc6-dev libnuma1 \
 && { python3 -c "import os,sys,sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
      || apt-get install -y --no-install-recommends python3-dev; } \
 && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv "$VIRTUAL_ENV"
COPY docker/requirements/inference-gpu.lock /tmp/inference-gpu.lock
# `vllm --version` needs a GPU to infer the device; importing the package does not.
RUN pip install --no-deps -r /tmp/inference-gpu.lock && python3 -c "import vllm; print(vllm.__version__)"
RUN pip install --no-deps trl==1.16.0
COPY services/inference/server /src/inference-server
RUN pip install --no-deps /src/inference-server && python3 -c "import rlstack_inference, vllm"

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
