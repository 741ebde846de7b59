"""iptables owner rules that confine each sandbox uid to its own proxy port.

Seat ``i`` (uid ``U``) may open connections only to ``127.0.0.1:<its sandbox proxy port>``, which
serves nothing but ``POST /v1/chat/completions`` for that seat's rollout. On loopback it may also
answer, from its own OpenCode server's port, connections the service opened to it. Everything else
the uid sends is rejected: the service's API port, other seats' proxy and agent ports, other hosts,
DNS, IPv6. A uid that binds another seat's agent port cannot answer on it. The uids that run the
held-out checks (``VERIFIER_UID_BASE + i``) may send nothing at all.
"""

import shutil
import subprocess
from dataclasses import dataclass

CHAIN = "RLSTACK_SANDBOX"


@dataclass(frozen=True)
class SeatPorts:
    """A seat's uid, the proxy port it may call and the port its OpenCode server answers on."""

    uid: int
    proxy_port: int
    agent_port: int


def seat_rules(seat: SeatPorts) -> list[list[str]]:
    """The ACCEPT rules of one seat (appended to ``CHAIN``)."""
    owner = ["-m", "owner", "--uid-owner", str(seat.uid), "-o", "lo", "-p", "tcp"]
    return [
        [*owner, "-d", "127.0.0.1", "--dport", str(seat.proxy_port), "-j", "ACCEPT"],
        [*owner, "--sport", str(seat.agent_port), "-m", "conntrack", "--ctstate", "ESTABLISHED", "-j", "ACCEPT"],
    ]


def _run(tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([tool, *args], capture_output=True, text=True, check=check, timeout=30)


def apply_network_rules(seats: list[SeatPorts], verifier_uids: list[int]) -> None:
    """(Re)write ``CHAIN`` for ``seats`` and send the output of their uid range and of the verifiers'
    uid range through it: verifiers get no ACCEPT rule, so their checks reach no address at all.
    Raises on failure."""
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed")
    ranges = [[s.uid for s in seats], verifier_uids]
    jumps = [["OUTPUT", "-m", "owner", "--uid-owner", f"{min(uids)}-{max(uids)}", "-j", CHAIN] for uids in ranges]
    for tool in ("iptables", "ip6tables"):
        _run(tool, "-N", CHAIN, check=False)  # exists after a restart in the same network namespace
        _run(tool, "-F", CHAIN)
        if tool == "iptables":
            for seat in seats:
                for rule in seat_rules(seat):
                    _run(tool, "-A", CHAIN, *rule)
        _run(tool, "-A", CHAIN, "-j", "REJECT")
        for jump in jumps:
            if _run(tool, "-C", *jump, check=False).returncode != 0:
                _run(tool, "-I", *jump)
