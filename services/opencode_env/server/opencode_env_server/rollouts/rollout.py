"""One rollout: its task, proxy key, sandboxes, caps on model calls, recorded turns and status."""

import asyncio
import logging
import secrets
import time

from opencode_env_client.models import (
    FINAL,
    INFRA_FAILURE,
    PENDING,
    RUNNING,
    STOPPED,
    CommandOutcome,
    RolloutRequest,
    RolloutSummary,
    Turn,
    Verification,
)

from ..sandbox.firewall import SetupWindow
from ..sandbox.sandbox import Sandbox
from ..settings import Settings, normalize_upstream
from .trace import TraceStore, extends

log = logging.getLogger("opencode_env_server.rollouts")


def new_identity() -> tuple[str, str]:
    """A rollout's id and its proxy API key."""
    return secrets.token_hex(8), "rk-" + secrets.token_urlsafe(24)


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
