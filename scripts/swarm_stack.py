#!/usr/bin/env python3
"""Render compose.yaml + compose.swarm.yaml into one stack file for ``docker stack deploy``.

    python3 scripts/swarm_stack.py [--only SERVICE ...] [-f EXTRA.yaml ...] > stack.json

``docker compose config`` merges the files and resolves every setting (``.env``, the environment);
this script then turns what Swarm does not take into what it does:
- ``build``, ``depends_on``, ``restart`` and the project ``name`` are dropped (Swarm has no start
  order; ``compose.swarm.yaml`` gives each service a restart policy instead), and so is
  ``cpu_shares`` (a Swarm service takes no CPU weight);
- ``shm_size`` becomes a tmpfs mounted on ``/dev/shm``;
- published ports are published in ``host`` mode on the node that runs the task (the routing mesh
  needs IPVS, which some kernels lack) and lose their host address (``127.0.0.1`` is a Compose-only
  binding: mind what a node exposes on its network);
- volume and network names are left to the stack (``<stack>_models`` ...).
Stdlib only; needs the Docker CLI with Compose v2.
"""

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DROPPED = ("build", "depends_on", "restart", "env_file", "pull_policy", "cpu_shares")
RESTART = {"no": "none", "always": "any", "unless-stopped": "any", "on-failure": "on-failure"}


def compose_config(files: list[Path]) -> dict[str, Any]:
    """The merged, resolved Compose model of ``files``."""
    command = ["docker", "compose", "--project-directory", str(ROOT)]
    for file in files:
        command += ["-f", str(file)]
    result = subprocess.run(command + ["config", "--format", "json"], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        sys.exit(f"swarm_stack: docker compose config failed:\n{result.stderr.strip()}")
    return json.loads(result.stdout)


def swarm_service(service: dict[str, Any]) -> dict[str, Any]:
    """One Compose service as a Swarm stack service (a new dict: ``service`` is left as it was)."""
    restart = RESTART.get(str(service.get("restart", "")))
    service = {k: copy.deepcopy(v) for k, v in service.items() if k not in DROPPED and v is not None}
    deploy = service.setdefault("deploy", {})
    # Swarm's stack files (version 3.9) have no process limit; the memory limit stays.
    deploy.get("resources", {}).get("limits", {}).pop("pids", None)
    if restart and "restart_policy" not in deploy:
        deploy["restart_policy"] = {"condition": restart}
    shm = service.pop("shm_size", None)
    if shm:
        service.setdefault("volumes", []).append({"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": int(shm)}})
    ports = []
    for port in service.get("ports", []):
        ports.append(
            {
                "target": int(port["target"]),
                "published": int(port["published"]),
                "protocol": port.get("protocol", "tcp"),
                "mode": "host",
            }
        )
    if ports:
        service["ports"] = ports
    for volume in service.get("volumes", []):
        if volume.get("volume") == {}:
            del volume["volume"]
    return service


def render(config: dict[str, Any], only: list[str]) -> dict[str, Any]:
    """The stack file: services (all, or ``only``), their volumes and the overlay network."""
    services = config["services"]
    unknown = sorted(set(only) - set(services))
    if unknown:
        sys.exit(f"swarm_stack: no service {', '.join(unknown)} (services: {', '.join(sorted(services))})")
    chosen = {name: swarm_service(s) for name, s in services.items() if not only or name in only}
    used = {v["source"] for s in chosen.values() for v in s.get("volumes", []) if v.get("type") == "volume"}
    networks = {}
    for name, network in config.get("networks", {}).items():
        networks[name] = {k: v for k, v in network.items() if k not in ("name", "ipam")}
    return {
        "version": "3.9",
        "services": chosen,
        "networks": networks,
        "volumes": {name: {} for name in config.get("volumes", {}) if name in used},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", default=[], metavar="SERVICE", help="render only these services")
    parser.add_argument(
        "-f",
        dest="extra",
        action="append",
        default=[],
        type=Path,
        help="another Compose file merged after compose.swarm.yaml",
    )
    args = parser.parse_args()
    config = compose_config([ROOT / "compose.yaml", ROOT / "compose.swarm.yaml", *args.extra])
    json.dump(render(config, args.only), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
