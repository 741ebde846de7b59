"""Rollout lifecycle: sandbox, agent process, turn and token caps, verification, persistence."""

import asyncio
import contextlib
import logging
import os
import secrets
import time
from dataclasses import dataclass

import aiohttp
from opencode_env_client.models import (
    COMPLETED,
    FINAL,
    INFRA_FAILURE,
    LIMIT_EXCEEDED,
    PENDING,
    RUNNING,
    SETUP_FAILED,
    STOPPED,
    TIMED_OUT,
    UNSCORED,
    CommandOutcome,
    Limits,
    RolloutRequest,
    RolloutSummary,
    Turn,
    Verification,
)

from . import opencode
from .agent_server import AgentFailed, AgentServer
from .firewall import SetupWindow
from .processes import UidNotEmpty
from .sandbox import Sandbox, SandboxError, clean_stale
from .settings import Settings, normalize_upstream
from .trace import TraceStore, extends
from .verification import Checked, Untrusted, run_checks

log = logging.getLogger("opencode_env_server.rollouts")


def new_identity() -> tuple[str, str]:
    """A rollout's id and its proxy API key."""
    return secrets.token_hex(8), "rk-" + secrets.token_urlsafe(24)


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


SEAT_RETRY_S = 5.0  # how often a seat whose uid could not be emptied is tried again


class CapacityError(RuntimeError):
    """Every rollout slot is taken."""


class LimitReached(RuntimeError):
    """The rollout may make no more model calls."""


class Rollout:
    """One task being run by one agent, with its proxy key and recorded turns."""

    def __init__(
        self,
        request: RolloutRequest,
        settings: Settings,
        seat: int,
        model: str,
        store: TraceStore,
        identity: tuple[str, str] | None = None,
    ) -> None:
        self.id, self.key = identity or new_identity()
        self.request = request
        self.task = request.task
        self.limits = request.task.limits
        self.seat = seat
        self.upstream_url = normalize_upstream(request.upstream_url or settings.inference_url)
        self.upstream_api_key = request.upstream_api_key
        self.model = model
        self.sampling = request.sampling
        self.record_turns = request.record_turns
        self.top_logprobs = request.top_logprobs
        self.sandbox = Sandbox(
            settings.sandbox_root, self.id, settings.seat_uid(seat), self.limits, settings.helper_python
        )
        # Where the held-out checks run once the agent is gone: the seat's verifier uid, a fresh directory.
        self.check_context = Sandbox(
            settings.sandbox_root, f"{self.id}.verify", settings.verifier_uid(seat), self.limits, settings.helper_python
        )
        # Where a harness's verifier operates once the agent is gone (``/rollouts/{id}/sandbox/...``).
        self.harness_context = Sandbox(
            settings.sandbox_root,
            f"{self.id}.harness",
            settings.verifier_uid(seat),
            self.limits,
            settings.helper_python,
        )
        self.operations = None  # the SandboxOperations of the sandbox API, made on first use
        # Held by whatever runs as the seat's verifier uid (the checks, a harness's verifier operations):
        # each empties that uid before and after it, so two at once would kill each other's processes.
        self.verifier_lock = asyncio.Lock()
        self.verifying: asyncio.Task | None = None  # the one verification of this rollout
        # The network of the setup phase (SETUP_NETWORK_ALLOW), None when there is none.
        allowed = settings.setup_network_allow if settings.network_isolation else ()
        self.setup_window = SetupWindow(self.sandbox.uid, allowed) if allowed else None
        self.status = PENDING
        self.detail: str | None = None
        self.turns: list[Turn] = []
        self._turns_started = 0
        self.completion_tokens = 0
        self._reserved_tokens = 0  # max_tokens of the calls in flight (admit_call .. release)
        self.agent_exit_code: int | None = None
        self.setup_results: list[CommandOutcome] = []
        self.verification: Verification | None = None
        self.created_at = time.time()
        self.first_call_at: float | None = None
        self.finished_at: float | None = None
        self.done = asyncio.Event()
        self.started = asyncio.Event()  # its first model call came, or it ended without one
        self.setup_over = asyncio.Event()  # its setup commands ran and their network is closed
        self.agent_prestarted = False  # served by the seat's warm OpenCode server, started before this rollout
        self.waiting_for_agent = False  # waiting for the seat's server to finish warming up
        self.runner: asyncio.Task | None = None  # ends once the rollout's processes are cleaned up
        self._store = store

    # --- called by the proxy -------------------------------------------------------------
    def next_turn_index(self) -> int:
        self._turns_started += 1
        return self._turns_started - 1

    def admit_call(self, requested: int | None = None) -> int:
        """Check the caps before a call and reserve its share of the completion-token budget: the
        call's ``max_tokens`` (``requested``, capped by the budget left and the per-turn cap), which
        it returns. Calls in flight hold their reservations until ``release``, so calls made in
        parallel cannot together overshoot the budget."""
        if self.status in FINAL:
            raise LimitReached(f"rollout {self.id} is {self.status}")
        if self.first_call_at is None:
            self.first_call_at = time.time()
            self.started.set()
        if self._turns_started >= self.limits.max_turns:
            self.stop(STOPPED, f"turn limit: {self.limits.max_turns} model calls")
            raise LimitReached(f"turn limit of {self.limits.max_turns} model calls reached")
        left = self.limits.max_completion_tokens - self.completion_tokens
        if left <= 0:
            self.stop(STOPPED, f"completion token limit: {self.limits.max_completion_tokens}")
            raise LimitReached(f"completion token limit of {self.limits.max_completion_tokens} reached")
        available = left - self._reserved_tokens
        if available <= 0:
            raise LimitReached(
                f"the {left} completion tokens left of {self.limits.max_completion_tokens} are reserved by this "
                "rollout's calls in flight; call again once one of them has answered"
            )
        granted = min(available, self.limits.max_tokens_per_turn, requested or self.limits.max_tokens_per_turn)
        self._reserved_tokens += granted
        return granted

    def release(self, reserved: int) -> None:
        """Return a finished call's reservation (its tokens are counted by ``record``)."""
        self._reserved_tokens -= reserved

    def record(self, turn: Turn) -> None:
        """Add a finished turn (prefix check against the previous successful one) and persist it;
        without ``record_turns`` only its completion tokens are counted (from the reply's usage)."""
        if not self.record_turns:
            self.completion_tokens += int((turn.response.get("usage") or {}).get("completion_tokens") or 0)
            return
        previous = next((t for t in reversed(self.turns) if t.ok), None)
        turn.prefix_consistent = extends(previous, turn.prompt_token_ids) if turn.ok else None
        self.turns.append(turn)
        self.completion_tokens += len(turn.completion_token_ids)
        self._store.append_turn(self.id, turn)

    def infra_failure(self, message: str) -> None:
        """The inference side failed: the rollout cannot be scored (reward None, never 0)."""
        log.warning("rollout %s: infrastructure failure: %s", self.id, message)
        self.stop(INFRA_FAILURE, message)

    # --- the setup phase's network ----------------------------------------------------------
    async def open_setup_network(self) -> None:
        """Let the sandbox reach SETUP_NETWORK_ALLOW (no-op without it)."""
        if self.setup_window is not None:
            await asyncio.to_thread(self.setup_window.open)

    async def end_setup_phase(self) -> None:
        """Kill every process of the sandbox's uid, then close the setup network: nothing the setup
        started reaches the agent phase with a connection. Raises ``processes.UidNotEmpty``."""
        if self.setup_window is not None and self.setup_window.is_open:
            try:
                await asyncio.to_thread(self.sandbox.kill_all)
            finally:
                await asyncio.to_thread(self.setup_window.close)

    # --- lifecycle ---------------------------------------------------------------------------
    def mark_running(self) -> bool:
        """PENDING -> RUNNING; False (and no change) if the rollout already ended: states only move forward."""
        if self.status != PENDING:
            return False
        self.status = RUNNING
        self.persist()
        return True

    def stop(self, status: str, detail: str) -> None:
        """End the rollout with ``status`` (first final status wins) and kill its processes."""
        if self.status not in FINAL:
            self.status, self.detail, self.finished_at = status, detail, time.time()
            self.sandbox.stop_processes()
            self.done.set()
            self.started.set()
            self.persist()

    def summary(self) -> RolloutSummary:
        """Status as the API reports it (no secrets)."""
        return RolloutSummary(
            rollout_id=self.id,
            task_id=self.task.task_id,
            status=self.status,
            final=self.status in FINAL,
            detail=self.detail,
            agent=self.request.agent,
            model=self.model,
            upstream_url=self.upstream_url,
            turns=len(self.turns),
            completion_tokens=self.completion_tokens,
            agent_exit_code=self.agent_exit_code,
            agent_prestarted=self.agent_prestarted,
            created_at=self.created_at,
            first_call_at=self.first_call_at,
            finished_at=self.finished_at,
            reward=None if self.verification is None else self.verification.reward,
            infra_failure=self.status == INFRA_FAILURE,
            setup_results=self.setup_results,
            limits=self.limits,
        )

    def persist(self) -> None:
        verification = None if self.verification is None else self.verification.model_dump()
        self._store.write_summary(self.id, {**self.summary().model_dump(), "verification": verification})


class RolloutManager:
    """Owns the sandbox seats (one uid and agent port each), the live rollouts and their keys.

    At most ``max_concurrent_rollouts`` rollouts hold a seat at once. With ``agent_prewarm`` there
    are ``agent_spares`` more seats, and each free seat holds a ``Prepared`` rollout whose OpenCode
    server is already started and warmed up, so creating a rollout only places its files and sends
    the prompt; the spares keep warm servers ready while the seats just given back warm up again.
    Servers are prepared with the limits of the latest OpenCode rollout (rlimits are fixed when a
    process starts): a rollout with new limits re-prepares the free seats. A rollout takes a free seat
    prepared with its limits, warm ones first; with none, or with its own agent, it gets a fresh
    sandbox instead.
    """

    def __init__(self, settings: Settings, store: TraceStore) -> None:
        self.settings = settings
        self.store = store
        self.seats = settings.seats
        self.free_seats = list(range(self.seats))
        self.rollouts: dict[str, Rollout] = {}
        self.by_key: dict[str, Rollout] = {}
        self.started_total = 0
        self.prepared: dict[int, Prepared] = {}  # by seat
        self.warming: dict[str, Prepared] = {}  # keys whose model calls get the proxy's warm-up reply
        self.latest_limits = Limits()  # what free seats are prepared with
        # A server start keeps about two cores busy for seconds: more at once only slows each down.
        self._warm_gate = asyncio.Semaphore(max(1, (os.cpu_count() or 2) // 2))
        self.http: aiohttp.ClientSession | None = None
        self.stopping = asyncio.Event()  # set when the service begins to shut down
        self._tasks: set[asyncio.Task] = set()

    @property
    def active(self) -> int:
        return len(self.by_key)

    @property
    def warm_agents(self) -> int:
        """Free seats whose OpenCode server is started and warmed up."""
        return sum(1 for p in self.prepared.values() if p.warm)

    def caller(self, key: str, seat: int | None) -> tuple[Rollout | None, bool]:
        """Who presents ``key``: (its rollout, whether it is a seat's warm-up key).

        A call that came in on seat ``seat``'s sandbox proxy port is accepted only with the key of
        that seat's own rollout (or its warming server): a key stolen from another seat is refused.
        """
        prepared = self.warming.get(key)
        if prepared is not None and seat in (None, prepared.seat):
            return None, True
        rollout = self.by_key.get(key)
        if rollout is None or (seat is not None and rollout.seat != seat):
            return None, False
        return rollout, False

    async def recover(self) -> None:
        """At start-up: remove the sandboxes of an earlier run and record the rollouts it left
        unfinished as infrastructure failures (they cannot be scored)."""
        removed = await asyncio.to_thread(clean_stale, self.settings.sandbox_root, self.settings.all_uids)
        unfinished = self.store.mark_unfinished(FINAL, INFRA_FAILURE, "service restarted while the rollout ran")
        if removed or unfinished:
            log.info(
                "start-up: removed %d stale sandboxes; %d unfinished rollouts recorded as infra_failure",
                removed,
                unfinished,
            )

    def start(self, http: aiohttp.ClientSession) -> None:
        """Begin serving: agents are driven over ``http``; free seats start warming up."""
        self.http = http
        if self.settings.agent_prewarm:
            for seat in self.free_seats:
                self._prepare(seat, self.latest_limits)

    def abandoned(self, now: float) -> list[Rollout]:
        """Rollouts ended more than ``FINISHED_ROLLOUT_TTL_S`` ago that no client closed (the client
        died): they would hold their slots for good."""
        ttl = self.settings.finished_rollout_ttl_s
        return [
            r
            for r in self.rollouts.values()
            if r.status in FINAL and r.finished_at is not None and now - r.finished_at > ttl
        ]

    async def run_reaper(self) -> None:
        """Close abandoned rollouts forever (their traces stay on disk), several times per TTL."""
        interval = min(max(self.settings.finished_rollout_ttl_s / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(interval)
            for rollout in self.abandoned(time.time()):
                log.warning(
                    "rollout %s ended %.0f s ago and was never closed: closing it to free its slot",
                    rollout.id,
                    time.time() - rollout.finished_at,
                )
                await self.close(rollout, rollout.status, rollout.detail)

    def _background(self, coroutine, name: str) -> asyncio.Task:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _agent(self, sandbox: Sandbox, seat: int) -> AgentServer:
        return AgentServer(sandbox, self.settings.agent_port_base + seat, self.http, self.settings.opencode_bin)

    async def _start_agent(self, agent: AgentServer, key: str, limits: Limits, seat: int) -> None:
        """Write the agent's config (its seat's proxy URL, key, output limit) and start its server."""
        proxy_url = f"http://127.0.0.1:{self.settings.sandbox_proxy_port(seat)}/v1"
        env = opencode.prepare(agent.sandbox, proxy_url, key, limits.max_tokens_per_turn, agent.password)
        with agent.sandbox.open_log() as agent_log:
            await agent.start(env, agent_log)

    def _prepare(self, seat: int, limits: Limits, after: asyncio.Task | None = None) -> None:
        rollout_id, key = new_identity()
        sandbox = Sandbox(
            self.settings.sandbox_root, rollout_id, self.settings.seat_uid(seat), limits, self.settings.helper_python
        )
        prepared = Prepared(rollout_id, key, seat, limits, sandbox, self._agent(sandbox, seat))
        prepared.ready = self._background(self._warm(prepared, after), f"warm-seat-{seat}")
        self.prepared[seat] = prepared

    async def _starts_done(self, timeout_s: float = 15.0) -> None:
        """Wait until every live rollout has made its first model call (at most ``timeout_s``);
        rollouts that are themselves waiting for a seat's warm-up do not count.

        Starting an OpenCode server takes both cores here for seconds; done while another rollout
        is starting, it would delay that rollout's first call, the latency the warm servers exist to cut.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(
            not r.started.is_set() and not r.waiting_for_agent for r in self.rollouts.values()
        ):
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
                await self._start_agent(prepared.agent, prepared.key, prepared.limits, prepared.seat)
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

    async def _discard(self, prepared: Prepared) -> None:
        prepared.ready.cancel()
        await asyncio.wait({prepared.ready})
        try:
            await asyncio.to_thread(prepared.sandbox.destroy)
        except (UidNotEmpty, OSError) as exc:  # the seat's next sandbox kills and removes again first
            log.warning("seat uid %d: discarding its prepared sandbox: %s", prepared.sandbox.uid, exc)

    def _seat_for(self, request: RolloutRequest) -> int:
        """The free seat to use: for OpenCode one prepared with the request's limits, warm ones first;
        for an external agent one whose prepared server is least useful."""

        def usefulness(seat: int) -> int:
            prepared = self.prepared.get(seat)
            if prepared is None or prepared.limits != request.task.limits:
                return 0
            return 2 if prepared.warm else 1

        choose = max if request.agent == "opencode" else min
        return choose(self.free_seats, key=usefulness)

    def _retarget(self, limits: Limits) -> None:
        """Prepare the free seats with ``limits`` from now on, re-preparing those that have others."""
        self.latest_limits = limits
        for seat in self.free_seats:
            stale = self.prepared.get(seat)
            if stale is not None and stale.limits != limits:
                self._prepare(seat, limits, after=self._background(self._discard(stale), f"discard-seat-{seat}"))

    def create(self, request: RolloutRequest, model: str) -> Rollout:
        """Take a seat and start the rollout in the background."""
        if self.active >= self.settings.max_concurrent_rollouts:
            raise CapacityError(
                f"All {self.settings.max_concurrent_rollouts} rollout slots are in use "
                f"(active {self.active}); close finished rollouts or raise MAX_CONCURRENT_ROLLOUTS"
            )
        seat = self._seat_for(request)
        self.free_seats.remove(seat)
        prepared = self.prepared.pop(seat, None)
        if request.agent == "opencode" and request.task.limits != self.latest_limits:
            self._retarget(request.task.limits)
        identity = (prepared.rollout_id, prepared.key) if prepared else None
        rollout = Rollout(request, self.settings, seat, model, self.store, identity)
        self.rollouts[rollout.id] = rollout
        self.by_key[rollout.key] = rollout
        self.started_total += 1
        rollout.runner = self._background(self._run(rollout, prepared), f"rollout-{rollout.id}")
        return rollout

    async def _take_agent(self, rollout: Rollout, prepared: Prepared | None) -> AgentServer | None:
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
            await self._discard(prepared)
        if rollout.status not in FINAL:
            await asyncio.to_thread(rollout.sandbox.create)
        return None

    async def _run(self, rollout: Rollout, prepared: Prepared | None) -> None:
        sandbox, task = rollout.sandbox, rollout.task
        watchdog: asyncio.Task | None = None
        try:
            agent = await self._take_agent(rollout, prepared)
            if rollout.status in FINAL:
                return  # finished or closed by the client while its sandbox was being made
            await sandbox.add_files(task.files)
            if not rollout.mark_running():
                return
            # Memory and disk are watched for the whole rollout: setup commands and the agent alike.
            watchdog = asyncio.create_task(sandbox.watch())
            watchdog.add_done_callback(lambda w: w.cancelled() or rollout.stop(LIMIT_EXCEEDED, w.result()))
            await asyncio.wait_for(self._setup_and_agent(rollout, agent), timeout=rollout.limits.wall_s)
        except TimeoutError:
            rollout.stop(TIMED_OUT, f"wall-clock limit of {rollout.limits.wall_s:g}s")
        except Exception as exc:  # a bug or an OS error: never leave a rollout running
            log.exception("rollout %s failed", rollout.id)
            rollout.stop(INFRA_FAILURE, f"{type(exc).__name__}: {exc}")
        finally:
            if watchdog is not None:
                watchdog.cancel()
            await asyncio.to_thread(sandbox.stop_processes)
            if rollout.setup_window is not None:
                await asyncio.to_thread(rollout.setup_window.close)

    async def _setup(self, rollout: Rollout) -> None:
        """The task's setup commands, with the setup network (if any) open while they run."""
        if rollout.task.setup:
            await rollout.open_setup_network()
        try:
            for command in rollout.task.setup:
                result = await rollout.sandbox.run(command, timeout_s=rollout.limits.wall_s)
                rollout.setup_results.append(result)
                if rollout.sandbox.violation:
                    rollout.stop(LIMIT_EXCEEDED, rollout.sandbox.violation)
                if rollout.status in FINAL:
                    return  # the watchdog or a limit ended it meanwhile
                if result.exit_code != 0:
                    rollout.stop(SETUP_FAILED, f"setup command failed ({result.exit_code}): {command}")
                    return
        finally:
            await rollout.end_setup_phase()
            rollout.setup_over.set()

    async def _setup_and_agent(self, rollout: Rollout, agent: AgentServer | None) -> None:
        await self._setup(rollout)
        if rollout.status in FINAL:
            return
        if rollout.request.agent == "external":
            await rollout.done.wait()
            return
        if agent is None:
            agent = self._agent(rollout.sandbox, rollout.seat)
            try:
                await self._start_agent(agent, rollout.key, rollout.limits, rollout.seat)
            except AgentFailed as exc:
                rollout.infra_failure(f"OpenCode server did not start: {exc}")
                return
        with rollout.sandbox.open_log() as events:
            session = asyncio.create_task(agent.run_session(rollout.task.instruction, events))
            ended = asyncio.create_task(rollout.done.wait())
            await asyncio.wait({session, ended}, return_when=asyncio.FIRST_COMPLETED)
            ended.cancel()
            if rollout.status in FINAL:  # a limit or the client ended it; stop() killed the agent
                session.cancel()
                with contextlib.suppress(asyncio.CancelledError, AgentFailed):
                    await session
                return
            try:
                rollout.agent_exit_code = session.result()
            except AgentFailed as exc:
                with contextlib.suppress(asyncio.TimeoutError):  # its stream closes before it is reaped
                    await asyncio.wait_for(agent.process.wait(), timeout=2)
                if agent.alive or rollout.first_call_at is None:
                    # Still up, or gone (or never ours) before the policy acted: nothing to score.
                    rollout.infra_failure(f"OpenCode server failed: {exc}")
                    return
                # The agent's server died after the policy acted (the agent may kill it): like a crashed CLI run.
                rollout.agent_exit_code = agent.process.returncode
            if rollout.sandbox.violation:
                rollout.stop(LIMIT_EXCEEDED, rollout.sandbox.violation)
            if rollout.first_call_at is None:
                rollout.infra_failure("the OpenCode session ended without a model call")
            rollout.stop(COMPLETED, f"agent finished (exit code {rollout.agent_exit_code})")

    async def verify(self, rollout: Rollout) -> Verification:
        """Run the held-out tests in a trusted context (``verification``); reward = fraction passed
        (None without tests, for an unscored rollout, or when the agent's processes survive). Once per
        rollout: concurrent and repeated calls get the same result (a caller that goes away does not
        stop it)."""
        if rollout.status not in FINAL:
            raise ValueError(f"rollout {rollout.id} is still {rollout.status}; wait for it first")
        task = rollout.verifying
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = rollout.verifying = asyncio.ensure_future(self._verify(rollout))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and not asyncio.current_task().cancelling():
                raise ValueError(f"rollout {rollout.id} was closed while it was being verified") from None
            raise

    async def _verify(self, rollout: Rollout) -> Verification:
        # The status is final as soon as a limit hits; the agent's processes are gone only once the
        # runner has finished cleaning up.
        await asyncio.wait({rollout.runner})
        async with rollout.verifier_lock:
            if rollout.verification is not None:
                return rollout.verification
            reason = f"not scored: {rollout.status} ({rollout.detail})" if rollout.status in UNSCORED else None
            checked = Checked()
            if reason is None:
                try:
                    checked = await run_checks(rollout.sandbox, rollout.check_context, rollout.task)
                except Untrusted as exc:
                    reason = f"not scored: the agent's processes could not be ended ({exc})"
            results = checked.results
            passed = sum(r.passed for r in results)
            reward = passed / len(results) if results and reason is None else None
            if reward is None:
                status = "unscored"
            elif checked.limit is not None:
                status, reason = "limit_exceeded", f"verification stopped at a limit: {checked.limit}"
            else:
                status = "scored"
            rollout.verification = Verification(
                reward=reward, passed=passed, total=len(results), results=results, reason=reason, status=status
            )
            rollout.persist()
            return rollout.verification

    async def close(self, rollout: Rollout, status: str = STOPPED, detail: str = "closed by the client") -> None:
        """Stop the rollout if needed, delete its sandbox (off the loop) and free its seat (the trace
        stays on disk). The seat is handed out again only once its uids have no process left: until
        then it is retried in the background."""
        rollout.stop(status, detail)
        self.rollouts.pop(rollout.id, None)
        if self.by_key.pop(rollout.key, None) is None:
            return  # closed already
        await asyncio.wait({rollout.runner})  # stopped: it only cleans up now
        if rollout.verifying is not None and not rollout.verifying.done():
            rollout.verifying.cancel()  # an unfinished verification is no result (its waiters get 409)
            await asyncio.wait({rollout.verifying})
        async with rollout.verifier_lock:  # a harness's verifier operation in flight ends first
            emptied = await asyncio.to_thread(self._empty_seat, rollout)
        if emptied:
            self._give_back(rollout)
        else:
            self._background(self._give_back_once_empty(rollout), f"empty-seat-{rollout.seat}")

    async def _give_back_once_empty(self, rollout: Rollout) -> None:
        while not await asyncio.to_thread(self._empty_seat, rollout):
            await asyncio.sleep(SEAT_RETRY_S)
        self._give_back(rollout)

    def _give_back(self, rollout: Rollout) -> None:
        if self.settings.agent_prewarm and self.http is not None:
            self._prepare(rollout.seat, self.latest_limits, after=rollout.runner)
        self.free_seats.append(rollout.seat)

    @staticmethod
    def _empty_seat(rollout: Rollout) -> bool:
        """Remove the rollout's sandbox and check context; False (and a warning) while a uid of its
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

    async def agent_log(self, rollout: Rollout) -> str:
        """The tail of the rollout's agent log."""
        return await asyncio.to_thread(rollout.sandbox.read_log)

    async def shutdown(self) -> None:
        """Record every live rollout as an infrastructure failure ("service restarted"), remove the
        sandboxes and stop the prepared agents."""
        self.stopping.set()
        self.http = None  # closing rollouts prepares nothing new
        for rollout in list(self.rollouts.values()):
            await self.close(rollout, INFRA_FAILURE, "service restarted while the rollout ran")
        for prepared in list(self.prepared.values()):
            await self._discard(prepared)
        self.prepared.clear()
