# OpenCode environment: the real OpenCode CLI (npm opencode-ai, pinned) run per rollout in a local
# sandbox, behind the token-exact proxy. Build context: the repository root.
# Runs as root: it creates one unprivileged uid per rollout slot and sets iptables owner rules, so
# Compose gives it NET_ADMIN (see services/opencode_env/README.md, "Threat model").
ARG BASE_IMAGE=python:3.11-slim-bookworm

# uv (pinned) installs the locked wheels: parallel downloads, unpacking and byte-compilation (pip
# took most of a cold build). It lives in its own stage, bind-mounted where it is used, so no image
# ships it; its download cache is a BuildKit cache mount, so rebuilds after a lock change reuse wheels.
# Our own packages install with --no-cache: uv keys a directory's cached build on its pyproject.toml.
FROM ${BASE_IMAGE} AS uv
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir -q uv==0.13.9

FROM ${BASE_IMAGE} AS opencode
ARG OPENCODE_VERSION=1.18.33
RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# The npm package ships the platform binaries; its postinstall links the right one. Only that
# binary is kept: no Node at run time, nothing downloaded when a rollout starts.
RUN npm install -g "opencode-ai@${OPENCODE_VERSION}" \
 && cp -L "$(readlink -f "$(command -v opencode)")" /opencode \
 && /opencode --version

FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables git ripgrep procps tini ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=opencode /opencode /usr/local/bin/opencode
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy
RUN python3 -m venv "$VIRTUAL_ENV"
COPY docker/requirements/opencode-env.lock /tmp/opencode-env.lock
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    /opt/uv/bin/uv pip install --no-deps -r /tmp/opencode-env.lock
# The sandboxes' own Python tools (pytest: upstream task conventions), first on their PATH
# (``sandbox.SANDBOX_PATH``); git is the system's.
COPY docker/requirements/opencode-sandbox.lock /tmp/opencode-sandbox.lock
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    python3 -m venv /opt/sandbox-tools \
 && /opt/uv/bin/uv pip install --python /opt/sandbox-tools/bin/python --no-deps -r /tmp/opencode-sandbox.lock \
 && /opt/sandbox-tools/bin/python -m pytest --version
# The client package holds the wire contract (opencode_env_client.models); the server imports only that.
COPY services/opencode_env/client /src/opencode-env-client
COPY services/opencode_env/server /src/opencode-env-server
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    /opt/uv/bin/uv pip install --no-cache --no-deps /src/opencode-env-client /src/opencode-env-server && python3 -c "import opencode_env_server.app" \
 && opencode --version \
 && rm -f /tmp/uv-*.lock "$VIRTUAL_ENV/.lock"
ENV PYTHONUNBUFFERED=1 PORT=8000 SANDBOX_ROOT=/sandboxes TRACES_DIR=/data/traces
# Sandboxes may write only inside their own directory: no shared dir is writable by other uids
# (the service closes world-writable mounts such as /dev/shm again at start-up), and no program
# runs setuid or setgid.
RUN mkdir -p /sandboxes /data/traces && chmod 0711 /sandboxes && chmod 0700 /data/traces \
 && find / -xdev \( -type d -o -type f \) -perm -0002 -exec chmod o-w {} + \
 && find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
EXPOSE 8000
# A long start period costs nothing (the first success counts at once) and keeps Swarm, which
# replaces unhealthy tasks, from killing a replica that starts slowly on a loaded node.
HEALTHCHECK --interval=5s --timeout=3s --start-period=180s --retries=5 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
# tini reaps the orphans of killed sandboxes (the service would otherwise inherit them as zombies).
ENTRYPOINT ["tini", "--"]
CMD ["python3", "-m", "opencode_env_server"]
