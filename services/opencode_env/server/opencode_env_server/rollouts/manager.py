"""The rollout lifecycle: create (on a seat), run (sandbox, setup, agent, caps), verify, close."""

import asyncio
import contextlib
import logging
import time

import aiohttp
from opencode_env_client.models import (
    COMPLETED,
    FINAL,
    INFRA_FAILURE,
    LIMIT_EXCEEDED,
    SETUP_FAILED,
    STOPPED,
    TIMED_OUT,
    UNSCORED,
    RolloutRequest,
    Verification,
)

from ..sandbox.sandbox import clean_stale
from ..settings import Settings
from .agent_cli import AgentNotStarted, run_cli
from .agent_server import AgentFailed, AgentServer
from .agents import AGENTS
from .rollout import Rollout
from .seats import Prepared, Seats, empty_seat
from .trace import TraceStore
from .verification import Checked, Untrusted, run_checks

log = logging.getLogger("opencode_env_server.rollouts")


class CapacityError(RuntimeError):
    """Every rollout slot is taken."""


class RolloutManager:
    """Owns the live rollouts and their keys; at most ``max_concurrent_rollouts`` hold a seat of
    ``seats`` (``Seats``) at once."""

    def __init__(self, settings: Settings, store: TraceStore) -> None:
        self.settings = settings
        self.store = store
        self.rollouts: dict[str, Rollout] = {}
        self.by_key: dict[str, Rollout] = {}
        self.started_total = 0
        self.stopping = asyncio.Event()  # set when the service begins to shut down
        self._tasks: set[asyncio.Task] = set()
        self.seats = Seats(settings, self._background, self._starting)

    @property
    def active(self) -> int:
        return len(self.by_key)

    def caller(self, key: str, seat: int | None) -> tuple[Rollout | None, bool]:
        """Who presents ``key``: (its rollout, whether it is a seat's warm-up key).

        A call that came in on seat ``seat``'s sandbox proxy port is accepted only with the key of
        that seat's own rollout (or its warming server): a key stolen from another seat is refused.
        """
        if self.seats.warming_on(key, seat):
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
        self.seats.start(http)

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

    def _starting(self) -> bool:
        """Whether a live rollout has yet to make its first model call (not counting those waiting
        for a seat's warm-up)."""
        return any(not r.started.is_set() and not r.waiting_for_agent for r in self.rollouts.values())

    def create(self, request: RolloutRequest, model: str) -> Rollout:
        """Take a seat and start the rollout in the background."""
        if self.active >= self.settings.max_concurrent_rollouts:
            raise CapacityError(
                f"All {self.settings.max_concurrent_rollouts} rollout slots are in use "
                f"(active {self.active}); close finished rollouts or raise MAX_CONCURRENT_ROLLOUTS"
            )
        seat, prepared = self.seats.take(request)
        identity = (prepared.rollout_id, prepared.key) if prepared else None
        rollout = Rollout(request, self.settings, seat, model, self.store, identity)
        self.rollouts[rollout.id] = rollout
        self.by_key[rollout.key] = rollout
        self.started_total += 1
        rollout.runner = self._background(self._run(rollout, prepared), f"rollout-{rollout.id}")
        return rollout

    async def _run(self, rollout: Rollout, prepared: Prepared | None) -> None:
        sandbox, task = rollout.sandbox, rollout.task
        watchdog: asyncio.Task | None = None
        try:
            agent = await self.seats.take_agent(rollout, prepared)
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
        if rollout.request.agent != "opencode":
            return await self._run_cli_agent(rollout)
        if agent is None:
            agent = self.seats.agent(rollout.sandbox, rollout.seat)
            try:
                await self.seats.start_agent(agent, rollout.key, rollout.limits, rollout.seat)
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
        self._agent_finished(rollout, "the OpenCode session")

    async def _run_cli_agent(self, rollout: Rollout) -> None:
        agent = AGENTS[rollout.request.agent]
        try:
            exit_code = await run_cli(rollout, agent, self.settings.sandbox_proxy_origin(rollout.seat))
        except AgentNotStarted as exc:
            rollout.infra_failure(f"the agent did not start: {exc}")
            return
        if exit_code is not None:
            rollout.agent_exit_code = exit_code
            self._agent_finished(rollout, f"{agent.name} (exit code {exit_code})")

    @staticmethod
    def _agent_finished(rollout: Rollout, who: str) -> None:
        """The agent ended on its own: completed, unless a limit was hit or the policy never acted."""
        if rollout.sandbox.violation:
            rollout.stop(LIMIT_EXCEEDED, rollout.sandbox.violation)
        if rollout.first_call_at is None:
            rollout.infra_failure(f"{who} ended without a model call")
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
            emptied = await asyncio.to_thread(empty_seat, rollout)
        self.seats.give_back(rollout, emptied)

    async def agent_log(self, rollout: Rollout) -> str:
        """The tail of the rollout's agent log."""
        return await asyncio.to_thread(rollout.sandbox.read_log)

    async def shutdown(self) -> None:
        """Record every live rollout as an infrastructure failure ("service restarted"), remove the
        sandboxes and stop the prepared agents."""
        self.stopping.set()
        self.seats.http = None  # closing rollouts prepares nothing new
        for rollout in list(self.rollouts.values()):
            await self.close(rollout, INFRA_FAILURE, "service restarted while the rollout ran")
        await self.seats.shutdown()
