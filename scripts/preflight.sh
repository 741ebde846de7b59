#!/usr/bin/env bash
# What `make up` (PURPOSE=up) and `make test` (PURPOSE=test) need before they start: a running Docker
# engine with the Compose v2 plugin (and, for the tests, Chromium and Python's venv). When something
# is missing: as root, provision it with the script CI uses (scripts/provision-docker.sh, one line
# per step); as another user, stop with one message naming the command to run.
set -euo pipefail
cd "$(dirname "$0")/.."
PURPOSE=${PURPOSE:-up}

missing=()
docker info >/dev/null 2>&1 || missing+=("a running Docker engine")
docker compose version >/dev/null 2>&1 || missing+=("the Docker Compose v2 plugin")
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=("Python 3 with venv")
if [ "$PURPOSE" = test ]; then
  command -v chromium >/dev/null 2>&1 || missing+=("Chromium (the dashboard test)")
fi
[ ${#missing[@]} -eq 0 ] && exit 0

joined=$(printf '%s, ' "${missing[@]}"); joined=${joined%, }
if [ "$(id -u)" -ne 0 ]; then
  echo "make $PURPOSE: this host lacks $joined. Run once as root: sudo bash scripts/provision-docker.sh" \
       "(or use a user that can reach a Docker engine with Compose v2), then make $PURPOSE again." >&2
  exit 1
fi
echo "make $PURPOSE: this host lacks $joined; provisioning (scripts/provision-docker.sh)"
PROVISION_FOR=$PURPOSE exec bash scripts/provision-docker.sh
