#!/usr/bin/env bash
# `make swarm-up`: deploy the stack on the Docker Swarm this engine manages (compose.yaml +
# compose.swarm.yaml, rendered by scripts/swarm_stack.py). With no swarm, it makes a single-node one.
# Images: built here; copied to the nodes in SWARM_NODE_HOSTS first (scripts/swarm-images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# The stack's settings, as Compose reads them (the environment wins over .env).
if [ -f .env ]; then
  saved=$(export -p)
  set -a; . ./.env; set +a
  eval "$saved"
fi
STACK=${SWARM_STACK:-rlstack}
LABEL=${SWARM_MAIN_LABEL:-gpu}

if [ "$(docker info -f '{{.Swarm.LocalNodeState}}')" != active ]; then
  echo "swarm-up: this engine is in no swarm; making a single-node one (docker swarm init)"
  docker swarm init ${SWARM_ADVERTISE_ADDR:+--advertise-addr "$SWARM_ADVERTISE_ADDR"} >/dev/null
fi
if [ "$(docker info -f '{{.Swarm.ControlAvailable}}')" != true ]; then
  echo "swarm-up: this node is no swarm manager; run make swarm-up on a manager" >&2
  exit 1
fi
if [ -z "$(docker node ls -q --filter "node.label=$LABEL=true")" ]; then
  echo "swarm-up: no node is labelled $LABEL=true; labelling this one (inference, the trainer and their volumes run there)"
  docker node update --label-add "$LABEL=true" "$(docker info -f '{{.Swarm.NodeID}}')" >/dev/null
fi
scripts/swarm-images.sh
stack_file=$(mktemp "${TMPDIR:-/tmp}/rlstack-stack.XXXXXX.json")
trap 'rm -f "$stack_file"' EXIT
python3 scripts/swarm_stack.py ${SWARM_SERVICES:+--only $SWARM_SERVICES} > "$stack_file"
docker stack deploy --resolve-image never --prune -c "$stack_file" "$STACK"
echo "swarm-up: stack $STACK deployed on $(docker node ls -q | wc -l) node(s); tasks: docker stack ps $STACK"
echo "swarm-up: ports are published on the node that runs each task (host mode):"
docker stack services "$STACK" --format '  {{.Name}}: {{.Replicas}} replicas, {{.Ports}}'
