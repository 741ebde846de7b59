"""The sandbox seats: one uid, verifier uid and agent port each, handed to one rollout at a time.

With ``agent_prewarm`` there are ``agent_spares`` more seats than rollout slots, and each free seat
holds a ``Prepared`` rollout whose OpenCode server is already started and warmed up, so creating a
rollout only places its files and sends the prompt; the spares keep warm servers ready while the
seats just given back warm up again. Servers are prepared with the limits of the latest OpenCode
rollout (rlimits are fixed when a process starts): a rollout with new limits re-prepares the free
seats. A rollout takes a free seat prepared with its limits, warm ones first; with none, or with its
own agent, it gets a fresh sandbox instead. A seat is handed out again only once its uids have no
process left.
"""

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
from opencode_env_client.models import FINAL, Limits, RolloutRequest

from ..sandbox.processes import UidNotEmpty
from ..sandbox.sandbox import Sandbox, SandboxError
from ..settings import Settings
from . import opencode
from .agent_server import AgentFailed, AgentServer
from .rollout import Rollout, new_identity

log = logging.getLogger("opencode_env_server.rollouts")
SEAT_RETRY_S = 5.0  # how often a seat whose uid could not be emptied is tried again
Background = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task]


@dataclass
class Prepared:
    """A free seat's next rollout, made ready before it is asked for: its identity, sandbox and an
    OpenCode server started (and warmed up) with the limits of the seat's previous rollout."""

    rollout_id: str
    key: str
    seat: int
    limits: Limits
    sandbox: Sandbox
    agent: AgentServer
    ready: asyncio.Task | None = None  # True once warm; False if the start failed (never raises)

    @property
    def warm(self) -> bool:
        return self.ready is not None and self.ready.done() and not self.ready.cancelled() and self.ready.result()


class Seats:
    """The seat pool: which seats are free, what each free one has prepared, and the warm-up keys.

    ``background`` runs a coroutine as a task the owner keeps; ``starting`` says whether a live
    rollout has yet to make its first model call (warm-ups wait for it, see ``_starts_done``).
    """

    def __init__(self, settings: Settings, background: Background, starting: Callable[[], bool]) -> None:
        self.settings = settings
        self.count = settings.seats
        self.free = list(range(self.count))
        self.prepared: dict[int, Prepared] = {}  # by seat
        self.warming: dict[str, Prepared] = {}  # keys whose model calls get the proxy's warm-up reply
        self.latest_limits = Limits()  # what free seats are prepared with
        self.http: aiohttp.ClientSession | None = None
        self._background = background
        self._starting = starting
        # A server start keeps about two cores busy for seconds: more at once only slows each down.
        self._warm_gate = asyncio.Semaphore(max(1, (os.cpu_count() or 2) // 2))

    @property
    def warm_agents(self) -> int:
        """Free seats whose OpenCode server is started and warmed up."""
        return sum(1 for p in self.prepared.values() if p.warm)

    def warming_on(self, key: str, seat: int | None) -> bool:
        """Whether ``key`` is the warm-up key of a server warming on ``seat`` (None: any seat)."""
        prepared = self.warming.get(key)
        return prepared is not None and seat in (None, prepared.seat)

    def start(self, http: aiohttp.ClientSession) -> None:
        """Begin serving: agents are driven over ``http``; free seats start warming up."""
        self.http = http
        if self.settings.agent_prewarm:
            for seat in self.free:
                self._prepare(seat, self.latest_limits)

    def agent(self, sandbox: Sandbox, seat: int) -> AgentServer:
        """The OpenCode server of ``seat`` (not started)."""
        return AgentServer(sandbox, self.settings.agent_port_base + seat, self.http, self.settings.opencode_bin)

    async def start_agent(self, agent: AgentServer, key: str, limits: Limits, seat: int) -> None:
        """Write the agent's config (its seat's proxy URL, key, output limit) and start its server."""
        proxy = self.settings.sandbox_proxy_origin(seat)
        env = opencode.prepare(agent.sandbox, proxy, key, limits.max_tokens_per_turn, agent.password)
        with agent.sandbox.open_log() as agent_log:
            await agent.start(env, agent_log)

    def take(self, request: RolloutRequest) -> tuple[int, Prepared | None]:
        """A free seat for ``request`` and what it had prepared; an OpenCode rollout with new limits
        re-prepares the other free seats with them."""
        seat = self.choose(request)
        self.free.remove(seat)
        prepared = self.prepared.pop(seat, None)
        if request.agent == "opencode" and request.task.limits != self.latest_limits:
            self._retarget(request.task.limits)
        return seat, prepared

    def choose(self, request: RolloutRequest) -> int:
        """The free seat to use: for OpenCode one prepared with the request's limits, warm ones first;
        for an external agent one whose prepared server is least useful."""

        def usefulness(seat: int) -> int:
            prepared = self.prepared.get(seat)
            if prepared is None or prepared.limits != request.task.limits:
                return 0
            return 2 if prepared.warm else 1

        choose = max if request.agent == "opencode" else min
        return choose(self.free, key=usefulness)

    async def take_agent(self, rollout: Rollout, prepared: Prepared | None) -> AgentServer | None:
        """The seat's warm agent if it suits the rollout; otherwise a fresh, empty sandbox and None."""
        if prepared is not None:
            if rollout.request.agent == "opencode" and prepared.limits == rollout.limits:
                rollout.waiting_for_agent = True
                ended = asyncio.ensure_future(rollout.done.wait())
                try:
                    await asyncio.wait({prepared.ready, ended}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    ended.cancel()
                    rollout.waiting_for_agent = False
                if prepared.warm and prepared.agent.alive and rollout.status not in FINAL:
                    rollout.agent_prestarted = True
                    return prepared.agent
            await self.discard(prepared)
        if rollout.status not in FINAL:
            await asyncio.to_thread(rollout.sandbox.create)
        return None

    def give_back(self, rollout: Rollout, emptied: bool) -> None:
        """Free the rollout's seat: now if ``emptied`` (``empty_seat``), else once its uids are empty."""
        if emptied:
            self._free(rollout)
        else:
            self._background(self._free_once_empty(rollout), f"empty-seat-{rollout.seat}")

    async def discard(self, prepared: Prepared) -> None:
        """Stop a prepared seat's warm-up and remove its sandbox."""
        prepared.ready.cancel()
        await asyncio.wait({prepared.ready})
        try:
            await asyncio.to_thread(prepared.sandbox.destroy)
        except (UidNotEmpty, OSError) as exc:  # the seat's next sandbox kills and removes again first
            log.warning("seat uid %d: discarding its prepared sandbox: %s", prepared.sandbox.uid, exc)

    async def shutdown(self) -> None:
        """Stop the prepared agents (the owner sets ``http`` to None first: nothing new is prepared)."""
        for prepared in list(self.prepared.values()):
            await self.discard(prepared)
        self.prepared.clear()

    async def _free_once_empty(self, rollout: Rollout) -> None:
        while not await asyncio.to_thread(empty_seat, rollout):
            await asyncio.sleep(SEAT_RETRY_S)
        self._free(rollout)

    def _free(self, rollout: Rollout) -> None:
        if self.settings.agent_prewarm and self.http is not None:
            self._prepare(rollout.seat, self.latest_limits, after=rollout.runner)
        self.free.append(rollout.seat)

    def _retarget(self, limits: Limits) -> None:
        """Prepare the free seats with ``limits`` from now on, re-preparing those that have others."""
        self.latest_limits = limits
        for seat in self.free:
            stale = self.prepared.get(seat)
            if stale is not None and stale.limits != limits:
                self._prepare(seat, limits, after=self._background(self.discard(stale), f"discard-seat-{seat}"))

    def _prepare(self, seat: int, limits: Limits, after: asyncio.Task | None = None) -> None:
        rollout_id, key = new_identity()
        sandbox = Sandbox(
            self.settings.sandbox_root, rollout_id, self.settings.seat_uid(seat), limits, self.settings.helper_python
        )
        prepared = Prepared(rollout_id, key, seat, limits, sandbox, self.agent(sandbox, seat))
        prepared.ready = self._background(self._warm(prepared, after), f"warm-seat-{seat}")
        self.prepared[seat] = prepared

    async def _starts_done(self, timeout_s: float = 15.0) -> None:
        """Wait until every live rollout has made its first model call (at most ``timeout_s``);
        rollouts that are themselves waiting for a seat's warm-up do not count.

        Starting an OpenCode server takes both cores here for seconds; done while another rollout
        is starting, it would delay that rollout's first call, the latency the warm servers exist to cut.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._starting():
            await asyncio.sleep(0.1)

    async def _warm(self, prepared: Prepared, after: asyncio.Task | None) -> bool:
        if after is not None:
            await asyncio.wait({after})  # the seat's previous rollout has cleaned up its processes
        await self._starts_done()
        async with self._warm_gate:
            self.warming[prepared.key] = prepared
            began = time.monotonic()
            try:
                await asyncio.to_thread(prepared.sandbox.create)
                await self.start_agent(prepared.agent, prepared.key, prepared.limits, prepared.seat)
                await prepared.agent.warm_up()
                log.info(
                    "seat uid %d: OpenCode server warm after %.1fs", prepared.sandbox.uid, time.monotonic() - began
                )
                return True
            except (TimeoutError, AgentFailed, SandboxError, UidNotEmpty, OSError) as exc:
                log.warning(
                    "seat uid %d: warming up OpenCode failed (%s); its next rollout starts it afresh",
                    prepared.sandbox.uid,
                    exc,
                )
                await asyncio.to_thread(prepared.sandbox.stop_processes)
                return False
            finally:
                self.warming.pop(prepared.key, None)


def empty_seat(rollout: Rollout) -> bool:
    """Remove the rollout's sandbox and check contexts; False (and a warning) while a uid of its
    seat still has processes. A directory that cannot be removed does not hold the seat back."""
    for sandbox in (rollout.sandbox, rollout.check_context, rollout.harness_context):
        try:
            sandbox.destroy()
        except UidNotEmpty as exc:
            log.warning("seat of rollout %s not reusable yet: %s", rollout.id, exc)
            return False
        except OSError as exc:
            log.warning("rollout %s: removing %s: %s", rollout.id, sandbox.dir.name, exc)
    return True
