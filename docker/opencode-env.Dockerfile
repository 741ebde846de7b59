# OpenCode environment: real coding agents (OpenCode, claude-code, codex, mini-swe-agent, qwen-code;
# each pinned) run per rollout in a local sandbox, behind the token-exact proxy. Build context: the
# repository root. Each agent's wiring is data in services/opencode_env/.../rollouts/agents.py.
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

# The other npm agents. claude-code and codex ship native binaries in per-platform packages: only
# those are kept (no Node for them at run time). qwen-code is JavaScript: it runs on its own Node 22
# (npm's node-linux-* build; Debian's is 18), without its optional native add-ons.
FROM opencode AS npm-agents
ARG CLAUDE_CODE_VERSION=2.1.332
ARG CODEX_VERSION=0.171.0
ARG QWEN_CODE_VERSION=0.24.4
ARG NODE_VERSION=22.23.5
RUN case "$(dpkg --print-architecture)" in \
      amd64) npm_arch=x64 triple=x86_64-unknown-linux-musl ;; \
      arm64) npm_arch=arm64 triple=aarch64-unknown-linux-musl ;; \
      *) echo "no agent binaries for $(dpkg --print-architecture)" >&2; exit 1 ;; \
    esac \
 && npm install --prefix /tmp/npm --no-audit --no-fund --ignore-scripts \
      "@anthropic-ai/claude-code-linux-${npm_arch}@${CLAUDE_CODE_VERSION}" \
      "@openai/codex@${CODEX_VERSION}-linux-${npm_arch}" "node-linux-${npm_arch}@${NODE_VERSION}" \
 && mkdir -p /agents/bin /agents/node/bin \
 && cp "/tmp/npm/node_modules/@anthropic-ai/claude-code-linux-${npm_arch}/claude" /agents/bin/claude \
 && cp "/tmp/npm/node_modules/@openai/codex/vendor/${triple}/bin/codex" /agents/bin/codex \
 && cp "/tmp/npm/node_modules/node-linux-${npm_arch}/bin/node" /agents/node/bin/node \
 && npm install --prefix /agents/qwen-code --no-audit --no-fund --ignore-scripts --omit=optional \
      "@qwen-code/qwen-code@${QWEN_CODE_VERSION}" \
 && chmod -R a+rX /agents && find /agents/qwen-code -path '*/vendor/ripgrep/*' -name rg -exec chmod a+x {} + \
 && printf '#!/bin/sh\nexec /opt/agents/node/bin/node /opt/agents/qwen-code/node_modules/@qwen-code/qwen-code/cli-entry.js "$@"\n' \
      > /agents/bin/qwen && chmod 0755 /agents/bin/qwen \
 && /agents/bin/claude --version && /agents/bin/codex --version && /agents/node/bin/node --version \
 && rm -rf /tmp/npm /root/.npm

FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables git ripgrep procps tini ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=opencode /opencode /usr/local/bin/opencode
COPY --from=npm-agents /agents /opt/agents
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
# mini-swe-agent (PyPI) in a venv of its own; every agent's command is on the sandboxes' PATH.
COPY docker/requirements/agent-mini-swe-agent.lock /tmp/agent-mini-swe-agent.lock
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv --mount=type=cache,target=/root/.cache/uv \
    python3 -m venv /opt/agents/mini-swe-agent \
 && /opt/uv/bin/uv pip install --python /opt/agents/mini-swe-agent/bin/python --no-deps -r /tmp/agent-mini-swe-agent.lock \
 && ln -s /opt/agents/bin/claude /opt/agents/bin/codex /opt/agents/bin/qwen /opt/agents/mini-swe-agent/bin/mini /usr/local/bin/ \
 && claude --version && codex --version && qwen --version && HOME=/tmp mini --help >/dev/null
# The client package holds the wire contract (opencode_env_client.models); the server imports only that.
COPY services/opencode_env/client /src/opencode-env-client
COPY services/opencode_env/server /src/opencode-env-server
RUN --mount=type=bind,from=uv,source=/opt/uv,target=/opt/uv \
    /opt/uv/bin/uv pip install --no-cache --no-deps /src/opencode-env-client /src/opencode-env-server && python3 -c "import opencode_env_server.app" \
 && opencode --version \
 && rm -f /tmp/uv-*.lock /tmp/agent-*.lock "$VIRTUAL_ENV/.lock"
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
