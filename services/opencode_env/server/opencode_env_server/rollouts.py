"""Rollout lifecycle: sandbox, agent process, turn and token caps, verification, persistence."""

import asyncio
import logging
import secrets
import time
from pathlib import Path
from dataclasses import asdict
from typing import Any, Optional

from . import opencode
from .sandbox import CommandResult, Sandbox
from .settings import Settings
from .tasks import RolloutRequest
from .trace import TraceStore, Turn, extends

log = logging.getLogger("opencode_env_server.rollouts")

# Statuses; the last five are final.
PENDING, RUNNING = "pending", "running"
COMPLETED, STOPPED, TIMED_OUT, LIMIT_EXCEEDED, INFRA_FAILURE, SETUP_FAILED = (
    "completed", "stopped", "timed_out", "limit_exceeded", "infra_failure", "setup_failed")
FINAL = {COMPLETED, STOPPED, TIMED_OUT, LIMIT_EXCEEDED, INFRA_FAILURE, SETUP_FAILED}


class CapacityError(RuntimeError):
    """Every rollout slot is taken."""


class LimitReached(RuntimeError):
    """The rollout may make no more model calls."""


class Rollout:
    """One task being run by one agent, with its proxy key and recorded turns."""

    def __init__(self, request: RolloutRequest, settings: Settings, slot: int, model: str, store: TraceStore) -> None:
        self.id = secrets.token_hex(8)
        self.key = "rk-" + secrets.token_urlsafe(24)
        self.request = request
        self.task = request.task
        self.limits = request.task.limits
        self.slot = slot
        self.upstream_url = (request.upstream_url or settings.inference_url).rstrip("/")
        self.model = model
        self.sampling = request.sampling
        self.sandbox = Sandbox(settings.sandbox_root, self.id, settings.sandbox_uid_base + slot, self.limits)
        self.status = PENDING
        self.detail: Optional[str] = None
        self.turns: list[Turn] = []
        self._turns_started = 0
        self.completion_tokens = 0
        self.agent_exit_code: Optional[int] = None
        self.setup_results: list[CommandResult] = []
        self.verification: Optional[dict[str, Any]] = None
        self.created_at = time.time()
        self.first_call_at: Optional[float] = None
        self.finished_at: Optional[float] = None
        self.done = asyncio.Event()
        self.agent: Optional[asyncio.subprocess.Process] = None
        self.runner: Optional[asyncio.Task] = None  # ends once the rollout's processes are cleaned up
        self._store = store

    # --- called by the proxy -------------------------------------------------------------
    def next_turn_index(self) -> int:
        self._turns_started += 1
        return self._turns_started - 1

    def admit_call(self) -> int:
        """Check the caps before a call; returns the largest max_tokens it may use."""
        if self.status in FINAL:
            raise LimitReached(f"rollout {self.id} is {self.status}")
        if self.first_call_at is None:
            self.first_call_at = time.time()
        if self._turns_started >= self.limits.max_turns:
            self.stop(STOPPED, f"turn limit: {self.limits.max_turns} model calls")
            raise LimitReached(f"turn limit of {self.limits.max_turns} model calls reached")
        remaining = self.limits.max_completion_tokens - self.completion_tokens
        if remaining <= 0:
            self.stop(STOPPED, f"completion token limit: {self.limits.max_completion_tokens}")
            raise LimitReached(f"completion token limit of {self.limits.max_completion_tokens} reached")
        return min(remaining, self.limits.max_tokens_per_turn)

    def record(self, turn: Turn) -> None:
        """Add a finished turn (prefix check against the previous successful one) and persist it."""
        previous = next((t for t in reversed(self.turns) if t.ok), None)
        turn.prefix_consistent = extends(previous, turn.prompt_token_ids) if turn.ok else None
        self.turns.append(turn)
        self.completion_tokens += len(turn.completion_token_ids)
        self._store.append_turn(self.id, turn)

    def infra_failure(self, message: str) -> None:
        """The inference side failed: the rollout cannot be scored (reward None, never 0)."""
        log.warning("rollout %s: infrastructure failure: %s", self.id, message)
        self.stop(INFRA_FAILURE, message)

    # --- lifecycle ---------------------------------------------------------------------------
    def stop(self, status: str, detail: str) -> None:
        """End the rollout with ``status`` (first final status wins) and kill its processes."""
        if self.status not in FINAL:
            self.status, self.detail, self.finished_at = status, detail, time.time()
            self.sandbox.kill_all()
            self.done.set()
            self.persist()

    def summary(self) -> dict[str, Any]:
        """Status as the API reports it (no secrets)."""
        return {
            "rollout_id": self.id, "task_id": self.task.task_id, "status": self.status, "detail": self.detail,
            "agent": self.request.agent, "model": self.model, "upstream_url": self.upstream_url,
            "turns": len(self.turns), "completion_tokens": self.completion_tokens,
            "agent_exit_code": self.agent_exit_code, "created_at": self.created_at,
            "first_call_at": self.first_call_at, "finished_at": self.finished_at,
            "reward": None if self.verification is None else self.verification["reward"],
            "infra_failure": self.status == INFRA_FAILURE,
            "setup_results": [asdict(r) for r in self.setup_results], "limits": self.limits.model_dump(),
        }

    @property
    def agent_log_path(self) -> Path:
        """OpenCode's stdout/stderr, beside (not inside) the sandbox so the agent cannot rewrite it."""
        return self.sandbox.dir.parent / f"{self.id}.agent.log"

    def persist(self) -> None:
        self._store.write_summary(self.id, {**self.summary(), "verification": self.verification})



class RolloutManager:
    """Owns the slots (one sandbox uid each), the live rollouts and their keys."""

    def __init__(self, settings: Settings, store: TraceStore) -> None:
        self.settings = settings
        self.store = store
        self.free_slots = list(range(settings.max_concurrent_rollouts))
        self.rollouts: dict[str, Rollout] = {}
        self.by_key: dict[str, Rollout] = {}
        self._tasks: set[asyncio.Task] = set()

    @property
    def active(self) -> int:
        return len(self.by_key)

    def create(self, request: RolloutRequest, model: str) -> Rollout:
        """Take a slot and start the rollout in the background."""
        if not self.free_slots:
            raise CapacityError(f"All {self.settings.max_concurrent_rollouts} rollout slots are in use "
                                f"(active {self.active}); close finished rollouts or raise MAX_CONCURRENT_ROLLOUTS")
        rollout = Rollout(request, self.settings, self.free_slots.pop(0), model, self.store)
        self.rollouts[rollout.id] = rollout
        self.by_key[rollout.key] = rollout
        task = rollout.runner = asyncio.create_task(self._run(rollout), name=f"rollout-{rollout.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return rollout

    async def _run(self, rollout: Rollout) -> None:
        sandbox, task = rollout.sandbox, rollout.task
        watchdog: Optional[asyncio.Task] = None
        try:
            await asyncio.to_thread(sandbox.create, task.files)
            rollout.status = RUNNING
            rollout.persist()
            # Memory and disk are watched for the whole rollout: setup commands and the agent alike.
            watchdog = asyncio.create_task(sandbox.watch())
            watchdog.add_done_callback(lambda w: w.cancelled() or rollout.stop(LIMIT_EXCEEDED, w.result()))
            await asyncio.wait_for(self._setup_and_agent(rollout), timeout=rollout.limits.wall_s)
        except asyncio.TimeoutError:
            rollout.stop(TIMED_OUT, f"wall-clock limit of {rollout.limits.wall_s:g}s")
        except Exception as exc:  # a bug or an OS error: never leave a rollout running
            log.exception("rollout %s failed", rollout.id)
            rollout.stop(INFRA_FAILURE, f"{type(exc).__name__}: {exc}")
        finally:
            if watchdog is not None:
                watchdog.cancel()
            sandbox.kill_all()

    async def _setup_and_agent(self, rollout: Rollout) -> None:
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
        if rollout.request.agent == "external":
            await rollout.done.wait()
            return
        sandbox = rollout.sandbox
        proxy_url = f"http://127.0.0.1:{self.settings.port}/v1"
        env = opencode.prepare(sandbox, proxy_url, rollout.key, rollout.limits.max_tokens_per_turn)
        with open(rollout.agent_log_path, "wb") as agent_log:
            rollout.agent = await sandbox.spawn(opencode.command(self.settings.opencode_bin, rollout.task.instruction),
                                                env, agent_log, asyncio.subprocess.STDOUT)
            exited = asyncio.create_task(rollout.agent.wait())
            ended = asyncio.create_task(rollout.done.wait())
            await asyncio.wait({exited, ended}, return_when=asyncio.FIRST_COMPLETED)
            ended.cancel()
            if exited.done():
                rollout.agent_exit_code = exited.result()
                if sandbox.violation:
                    rollout.stop(LIMIT_EXCEEDED, sandbox.violation)
                rollout.stop(COMPLETED, f"agent exited with {rollout.agent_exit_code}")
            else:  # stop() already killed the agent
                rollout.agent_exit_code = await exited

    async def verify(self, rollout: Rollout) -> dict[str, Any]:
        """Run the held-out tests in the sandbox; reward = fraction passed (None without tests)."""
        if rollout.status not in FINAL:
            raise ValueError(f"rollout {rollout.id} is still {rollout.status}; wait for it first")
        if rollout.verification is not None:
            return rollout.verification
        # The status is final as soon as a limit hits; the agent's processes are gone only once the
        # runner has finished cleaning up (it would otherwise kill the tests too).
        await asyncio.wait({rollout.runner})
        if rollout.status in (INFRA_FAILURE, SETUP_FAILED):
            rollout.verification = {"reward": None, "passed": 0, "total": 0, "results": [],
                                    "reason": f"not scored: {rollout.status} ({rollout.detail})"}
            rollout.persist()
            return rollout.verification
        task, sandbox = rollout.task, rollout.sandbox
        results = []
        for i, case in enumerate(task.tests):
            run = await sandbox.run(task.test_command, timeout_s=task.test_timeout_s, stdin=case.stdin)
            passed = run.exit_code == 0 and run.stdout.strip() == case.expected_stdout.strip()
            results.append({"kind": "test", "index": i, "passed": passed, "exit_code": run.exit_code,
                            "timed_out": run.timed_out, "stdout": run.stdout[-2000:], "stderr": run.stderr[-2000:]})
        for command in task.verify_commands:
            run = await sandbox.run(command, timeout_s=task.test_timeout_s)
            results.append({"kind": "command", "command": command, "passed": run.exit_code == 0,
                            "exit_code": run.exit_code, "timed_out": run.timed_out,
                            "stdout": run.stdout[-2000:], "stderr": run.stderr[-2000:]})
        sandbox.kill_all()
        passed = sum(r["passed"] for r in results)
        rollout.verification = {"reward": passed / len(results) if results else None, "passed": passed,
                                "total": len(results), "results": results}
        rollout.persist()
        return rollout.verification

    def close(self, rollout: Rollout) -> None:
        """Stop the rollout if needed, delete its sandbox and free its slot (the trace stays on disk)."""
        rollout.stop(STOPPED, "closed by the client")
        if self.by_key.pop(rollout.key, None) is not None:
            rollout.sandbox.destroy()
            rollout.agent_log_path.unlink(missing_ok=True)
            self.free_slots.append(rollout.slot)
        self.rollouts.pop(rollout.id, None)

    def agent_log(self, rollout: Rollout) -> str:
        path = rollout.agent_log_path
        return path.read_text(errors="replace")[-64_000:] if path.exists() else ""

    async def shutdown(self) -> None:
        for rollout in list(self.rollouts.values()):
            self.close(rollout)

