# reasoning-gym OpenEnv server. Build context: the repository root.
#   docker build -f docker/reasoning-gym-env.Dockerfile -t rlstack/reasoning-gym-env .
# BASE_IMAGE: an official Python 3.11 slim image, or the offline one from docker/build-base-image.sh.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# uv (pinned) installs the locked wheels: parallel downloads, unpacking and byte-compilation (pip
# took most of a cold build). It lives in its own stage, bind-mounted where it is used, so no image
# ships it; its download cache is a BuildKit cache mount, so rebuilds after a lock change reuse wheels.
# Our own packages install with --no-cache: uv keys a directory's cached build on its pyproject.toml.
FROM ${BASE_IMAGE} AS uv
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir -q uv==0.13.9

FROM ${BASE_IMAGE} AS build
# reasoning-gym pins pycosat, which has no wheel for 3.11: it needs a C compiler and Python.h
# (python:*-slim ships Python.h; Debian's python3 needs python3-dev).
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && { python3 -c "import os,sys,sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
      || apt-get install -y --no-install-recommends python3-dev; } \
 && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy
RUN python3 -m venv "$VIRTUAL_ENV"
COPY docker/requirements/reasoning-gym-env.lock /tmp/reasoning-gym-env.lock
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    /opt/uv/bin/uv pip install --no-deps -r /tmp/reasoning-gym-env.lock
COPY services/reasoning_gym_env/client /src/client
COPY services/reasoning_gym_env/server /src/server
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    /opt/uv/bin/uv pip install --no-cache --no-deps /src/client /src/server \
 && python3 -c "import reasoning_gym_env_server, reasoning_gym_env"

FROM ${BASE_IMAGE}
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    HOST=0.0.0.0 PORT=8000
RUN useradd --system --uid 10001 --home-dir /home/app --create-home app
COPY --from=build /opt/venv /opt/venv
USER app
WORKDIR /home/app
# reasoning-gym imports matplotlib, which builds its font cache on first import (seconds of CPU at
# every start of a fresh container, enough to fail a loaded node's health check): build it here.
RUN python3 -c "import matplotlib.font_manager"
EXPOSE 8000
# A long start period costs nothing (the first success counts at once) and keeps Swarm, which
# replaces unhealthy tasks, from killing a replica that starts slowly on a loaded node.
HEALTHCHECK --interval=5s --timeout=3s --start-period=180s --retries=5 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PORT', '8000'), timeout=2)"]
CMD ["python3", "-m", "reasoning_gym_env_server"]
