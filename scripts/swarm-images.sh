#!/usr/bin/env bash
# Copy the env services' images to the swarm's other nodes without a registry: for every Docker host
# in SWARM_NODE_HOSTS (e.g. "ssh://me@node2 tcp://10.0.0.3:2375"), `docker save | docker -H HOST load`
# of each image in SWARM_IMAGES that the node lacks or holds in another version. One line per copy.
set -euo pipefail
TAG=${RLSTACK_TAG:-dev}
IMAGES=${SWARM_IMAGES:-rlstack/reasoning-gym-env:$TAG rlstack/opencode-env:$TAG}
for host in ${SWARM_NODE_HOSTS:-}; do
  for image in $IMAGES; do
    want=$(docker image inspect -f '{{.Id}}' "$image")
    have=$(docker -H "$host" image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
    if [ "$want" != "$have" ]; then
      echo "swarm-images: $image -> $host"
      docker save "$image" | docker -H "$host" load -q >/dev/null
    fi
  done
done
