#!/usr/bin/env bash
# Re-resolve each docker/requirements/NAME.in into NAME.lock inside $BASE_IMAGE, so the pins match
# the Python and platform the images run on. Run via `make lock`.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BASE_IMAGE:?set BASE_IMAGE (make lock does)}"
for input in docker/requirements/*.in; do
  name=$(basename "$input" .in)
  echo "lock: $name"
  docker run --rm -v "$PWD/docker/requirements:/req" "$BASE_IMAGE" bash -ec "
    apt-get update -qq && apt-get install -y -qq gcc libc6-dev python3-dev >/dev/null
    python3 -m venv /v && /v/bin/pip install -q -r /req/$name.in && /v/bin/pip freeze --exclude-editable > /req/$name.lock"
done
