#!/usr/bin/env bash
# The GPU host check on a host without Docker: python3 with CUDA PyTorch and transformers, no network.
# Installs the wheel folder `make gpu-host-wheels` made into WORK/site-packages (the host's Python is left
# alone), then runs `python -m trainer.gpu.host_check` from there: reasoning-gym-env as a local
# process, then the stages device, walkthrough and learning, each under its own timeout, into
# WORK/report.json (docs/gpu.md, GPU host without Docker). Exit 0 on PASS, 1 on FAIL.
#
#   bash gpu-host-wheels/gpu-host-check.sh [--work DIR] [CHECK OPTIONS]   # --help lists them
#
# The wheel folder is the one this script sits in (make gpu-host-wheels copies it there), else
# gpu-host-wheels/ beside scripts/; GPU_HOST_WHEELS names another. PYTHON picks the interpreter.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${GPU_HOST_WHEELS:-}" ]; then wheels=$GPU_HOST_WHEELS
elif [ -f "$here/manifest.json" ]; then wheels=$here
else wheels=$here/../gpu-host-wheels
fi
python=${PYTHON:-python3}
work=gpu-host-check
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --work) work=$2; shift 2 ;;
    --work=*) work=${1#--work=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ ! -f "$wheels/manifest.json" ]; then
  echo "gpu-host-check: no wheel folder at $wheels (make gpu-host-wheels makes one; GPU_HOST_WHEELS names it)" >&2
  exit 2
fi
want=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['python_version'])" "$wheels/manifest.json")
have=$("$python" -c "import sys; print('%d.%d' % sys.version_info[:2])")
if [ "$want" != "$have" ]; then
  echo "gpu-host-check: the wheels are for Python $want, $python is $have (make gpu-host-wheels GPU_HOST_PYTHON=python$have)" >&2
  exit 2
fi
"$python" -c "import torch, transformers" 2>/dev/null || {
  echo "gpu-host-check: $python cannot import torch and transformers; the check runs on a Python that has them" >&2
  exit 2
}
mkdir -p "$work"
work=$(cd "$work" && pwd)
# Named site-packages: dill (datasets' fingerprints) pickles a module by reference only when its path
# has "site-packages" in it or lies under sys.prefix; elsewhere it pickles pyarrow's classes by value,
# which fails.
site=$work/site-packages
echo "gpu-host-check: installing $(ls "$wheels"/*.whl | wc -l) wheels from $wheels into $site (no network)"
rm -rf "$site"
now() { "$python" -c "import time; print(time.time())"; }
start=$(now)
"$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl
seconds=$("$python" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$start" "$(now)")
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
exec "$python" -m trainer.gpu.host_check --work "$work" --site "$site" --install-seconds "$seconds" "${args[@]}"
