#!/usr/bin/env bash
# Copy the CPU torch wheel the inference image needs into ./wheelhouse (the Docker build context),
# from pip's configured find-links folders (air-gapped hosts keep wheels there). With no such wheel
# the image build falls back to PyTorch's CPU index instead. Wheels are never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_WHEEL_GLOB=${TORCH_WHEEL_GLOB:-torch-2.13.0+cpu-cp311-*.whl}
mkdir -p wheelhouse
dirs=$({ pip3 config get global.find-links 2>/dev/null; pip3 config get :env:.find-links 2>/dev/null; echo "${PIP_FIND_LINKS:-}"; } | tr ' ' '\n' | sed 's#^file://##' | sort -u)
for dir in $dirs; do
  for wheel in "$dir"/$TORCH_WHEEL_GLOB; do
    [ -f "$wheel" ] || continue
    if [ ! -f "wheelhouse/$(basename "$wheel")" ]; then
      cp "$wheel" wheelhouse/
      echo "fill-wheelhouse: $(basename "$wheel") from $dir" >&2
    fi
  done
done
ls wheelhouse/$TORCH_WHEEL_GLOB >/dev/null 2>&1 || echo "fill-wheelhouse: no $TORCH_WHEEL_GLOB found; the build will use PyTorch's CPU index" >&2
