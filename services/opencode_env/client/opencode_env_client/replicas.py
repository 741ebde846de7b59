"""The replicas behind one OpenCode service name, each reached directly.

An OpenCode rollout is state on one replica (its sandbox, its proxy key, its trace), so every call
of a rollout must reach the replica that created it. ``ReplicaPool`` resolves the service's name to
its replicas' addresses (Swarm's ``tasks.<service>`` name first, which lists every task whatever the
endpoint mode, then the name itself: one address under Compose, every replica under ``dnsrr``),
keeps one ``OpenCodeEnvClient`` per replica, and starts each new rollout on the replica with the
most free rollout slots (from each replica's ``/health``). The caller keeps the client it got, which
pins the rollout. A replica that does not answer is left out until ``retry_s`` passed, so new rollouts
go to the living ones and a replica that returns takes work again.
"""

import logging
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import httpx

from .client import OpenCodeEnvClient, OpenCodeEnvError, ServiceBusyError
from .models import Health

log = logging.getLogger("opencode_env_client.replicas")

Resolver = Callable[[str, int], list[str]]


def resolve_ipv4(host: str, port: int) -> list[str]:
    """Every IPv4 address ``host`` resolves to, in the resolver's order ([] if it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return list(dict.fromkeys(info[4][0] for info in infos))


class ReplicaPool:
    """Clients of every replica behind ``base_url``'s host name; ``start()`` picks where a rollout starts.

    ``refresh_s``: how long a resolution is reused. ``retry_s``: how long a replica that failed to
    answer is skipped. With a single address (Compose, a published port, an IP) it is one client.
    """

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 30.0,
        poll_s: float = 30.0,
        health_timeout_s: float = 5.0,
        refresh_s: float = 5.0,
        retry_s: float = 15.0,
        resolve: Resolver = resolve_ipv4,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._parts = parts
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self.timeout_s, self.poll_s, self.health_timeout_s = timeout_s, poll_s, health_timeout_s
        self.refresh_s, self.retry_s = refresh_s, retry_s
        self._resolve, self._transport = resolve, transport
        self._clients: dict[str, OpenCodeEnvClient] = {}
        self._down_until: dict[str, float] = {}
        self._starting: dict[str, int] = {}  # creates in flight from this pool, by address (not yet in /health)
        self._addresses: list[str] = []
        self._resolved_at = -float("inf")
        self._lock = threading.Lock()
        self._choosing = threading.Lock()

    def _url_for(self, address: str) -> str:
        netloc = address if self._parts.port is None else f"{address}:{self._parts.port}"
        return urlunsplit((self._parts.scheme, netloc, self._parts.path, "", ""))

    def addresses(self) -> list[str]:
        """The replicas' addresses now (the configured host itself when it resolves to nothing)."""
        with self._lock:
            if time.monotonic() - self._resolved_at >= self.refresh_s:
                host = self._parts.hostname
                found = self._resolve(f"tasks.{host}", self._port) if _is_name(host) else []
                self._addresses = found or self._resolve(host, self._port) or [host]
                self._resolved_at = time.monotonic()
            return list(self._addresses)

    def client(self, address: str) -> OpenCodeEnvClient:
        """The client of one replica (made once, kept)."""
        with self._lock:
            if address not in self._clients:
                url = self.base_url if address == self._parts.hostname else self._url_for(address)
                self._clients[address] = OpenCodeEnvClient(
                    url, timeout_s=self.timeout_s, poll_s=self.poll_s, transport=self._transport
                )
            return self._clients[address]

    def health(self) -> dict[str, Health]:
        """``/health`` of every replica that answers, by address; the others are skipped for ``retry_s``."""
        healthy = {}
        for address in self.addresses():
            if self._down_until.get(address, 0.0) > time.monotonic():
                continue
            try:
                healthy[address] = self.client(address).health(timeout_s=self.health_timeout_s)
                self._down_until.pop(address, None)
            except OpenCodeEnvError as exc:
                self._mark_down(address, exc)
        return healthy

    def _mark_down(self, address: str, error: Exception) -> None:
        log.warning(
            "opencode-env replica %s does not answer (%s); skipping it for %.0f s", address, error, self.retry_s
        )
        self._down_until[address] = time.monotonic() + self.retry_s

    def ranked(self) -> list[str]:
        """Addresses of the answering replicas, the one with the most free rollout slots first (less the
        rollouts this pool is starting there; ties: the one that started fewest). Raises
        ``OpenCodeEnvError`` when none answers."""
        healthy = self.health()
        if not healthy:
            raise OpenCodeEnvError(f"no replica of {self.base_url} answers (addresses: {self.addresses()})")
        with self._lock:
            starting = dict(self._starting)
        return sorted(
            healthy,
            key=lambda a: (
                -(healthy[a].free_rollouts - starting.get(a, 0)),
                healthy[a].rollouts_total + starting.get(a, 0),
            ),
        )

    def start(self, create: Callable[[OpenCodeEnvClient], object]) -> tuple[OpenCodeEnvClient, object]:
        """Run ``create(client)`` on the best replica, the next ones when a replica is full or fails;
        returns the client that succeeded (every later call of that rollout must use it) and the result."""
        errors, all_busy = [], True
        with self._choosing:  # concurrent starts rank one after another, each seeing the others' picks
            order = self.ranked()
            self._count_start(order[0], +1)
        for position, address in enumerate(order):
            client = self.client(address)
            if position:
                self._count_start(address, +1)
            try:
                return client, create(client)
            except ServiceBusyError as exc:
                errors.append(str(exc))
            except OpenCodeEnvError as exc:
                if exc.status is not None:  # the request itself was refused: another replica would refuse it too
                    raise
                self._mark_down(address, exc)
                errors.append(str(exc))
                all_busy = False
            finally:
                self._count_start(address, -1)
        message = f"no replica of {self.base_url} could start the rollout: " + "; ".join(errors)
        if all_busy:
            raise ServiceBusyError(message, 503)
        raise OpenCodeEnvError(message)

    def _count_start(self, address: str, change: int) -> None:
        with self._lock:
            self._starting[address] = self._starting.get(address, 0) + change

    def close(self) -> None:
        """Close every replica's connection pool."""
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


def _is_name(host: str) -> bool:
    """Whether ``host`` is a DNS name (not an IP address, not ``localhost``)."""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return False
    except OSError:
        return host != "localhost"
