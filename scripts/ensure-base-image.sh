#!/usr/bin/env bash
# Print the base image to build on, making sure it exists locally.
# $BASE_IMAGE if set; else the official python:3.11-slim-bookworm if present or pullable; else the
# offline Debian-built local/py311-base:bookworm (built by docker/build-base-image.sh if missing).
# Progress goes to stderr so that callers can capture the tag: BASE_IMAGE=$(scripts/ensure-base-image.sh)
set -euo pipefail
OFFICIAL=python:3.11-slim-bookworm
OFFLINE=local/py311-base:bookworm
here=$(cd "$(dirname "$0")" && pwd)

if [ -n "${BASE_IMAGE:-}" ]; then
  if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    if [ "$BASE_IMAGE" = "$OFFLINE" ]; then
      "$here/../docker/build-base-image.sh" "$OFFLINE" >&2
    else
      docker pull "$BASE_IMAGE" >&2
    fi
  fi
  echo "$BASE_IMAGE"
elif docker image inspect "$OFFICIAL" >/dev/null 2>&1 || docker pull -q "$OFFICIAL" >/dev/null 2>&1; then
  echo "$OFFICIAL"
else
  if ! docker image inspect "$OFFLINE" >/dev/null 2>&1; then
    echo "ensure-base-image: cannot pull $OFFICIAL; building $OFFLINE offline with debootstrap" >&2
    "$here/../docker/build-base-image.sh" "$OFFLINE" >&2
  fi
  echo "$OFFLINE"
fi
