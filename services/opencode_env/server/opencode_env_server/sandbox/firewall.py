"""iptables owner rules that confine each sandbox uid to its own proxy port.

Seat ``i`` (uid ``U``) may open connections only to ``127.0.0.1:<its sandbox proxy port>``, which
serves nothing but ``POST /v1/chat/completions`` for that seat's rollout. On loopback it may also
answer, from its own OpenCode server's port, connections the service opened to it. Everything else
the uid sends is rejected: the service's API port, other seats' proxy and agent ports, other hosts,
DNS, IPv6. A uid that binds another seat's agent port cannot answer on it. The uids that run the
held-out checks (``VERIFIER_UID_BASE + i``) may send nothing at all.

With ``SETUP_NETWORK_ALLOW`` set, a rollout's setup phase (the task author's commands, before the
agent starts) may also reach the listed package indexes and the container's DNS resolver; the
rules are removed, after every process of the uid is killed, before the agent starts.
"""

import shutil
import socket
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


def nameservers(resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    """The IPv4 resolvers of this container (Docker's embedded DNS is 127.0.0.11)."""
    try:
        lines = open(resolv_conf).read().splitlines()
    except OSError:
        return []
    found = [line.split()[1] for line in lines if line.startswith("nameserver") and len(line.split()) > 1]
    return [address for address in found if address.count(".") == 3]


def resolve(destinations: tuple[tuple[str, int], ...]) -> list[tuple[str, int]]:
    """Every IPv4 address of each ``(host, port)``, resolved now (by the service, as root)."""
    addresses = []
    for host, port in destinations:
        try:
            infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            continue  # an index that does not resolve stays closed
        addresses += sorted({(info[4][0], port) for info in infos})
    return addresses


def setup_rules(uid: int, addresses: list[tuple[str, int]], resolvers: list[str]) -> list[list[str]]:
    """ACCEPT rules that let ``uid`` reach its resolvers (any port: Docker's embedded DNS rewrites the
    port before the filter sees it) and the allow-listed ``addresses``."""
    owner = ["-m", "owner", "--uid-owner", str(uid)]
    rules = [[*owner, "-d", resolver, "-j", "ACCEPT"] for resolver in resolvers]
    rules += [[*owner, "-p", "tcp", "-d", ip, "--dport", str(port), "-j", "ACCEPT"] for ip, port in addresses]
    return rules


class SetupWindow:
    """The network a rollout's setup phase may use: rules inserted ahead of the chain's REJECT while
    it is open. ``close`` is idempotent; the caller kills the uid's processes before closing, so no
    connection opened during setup outlives it."""

    def __init__(self, uid: int, destinations: tuple[tuple[str, int], ...]) -> None:
        self.uid = uid
        self.destinations = destinations
        self._rules: list[list[str]] = []

    @property
    def is_open(self) -> bool:
        return bool(self._rules)

    def open(self) -> None:
        """Insert the rules (blocking: run off the loop)."""
        self._rules = setup_rules(self.uid, resolve(self.destinations), nameservers())
        for rule in self._rules:
            _run("iptables", "-I", CHAIN, "1", *rule)

    def close(self) -> None:
        """Delete the rules (blocking: run off the loop)."""
        rules, self._rules = self._rules, []
        for rule in rules:
            _run("iptables", "-D", CHAIN, *rule, check=False)
