"""What a harness's ``SandboxBackend`` does in one rollout's sandbox: commands, background jobs and
text files, in the right context.

While the rollout runs, every operation runs as the agent's uid in its sandbox (the kernel's
permission checks apply, as for the agent itself). Once the rollout is final, operations run in the
trusted verification context: the runner has killed every agent process, the work dir is copied
into a fresh directory of the seat's verifier uid (``verification.enter``), and background jobs are
refused. So a verifier that runs after the agent never meets a process the agent left, and the
agent never sees what the verifier writes. Each verification-context operation holds the verifier
uid alone (it waits for the held-out checks of ``/verify`` and for other operations) and runs
``verification.bounded``: the uid emptied before and after it, the rollout's limits watched.
Commands marked ``setup`` (upstream's harness: all of them before the agent's job starts) may, with
SETUP_NETWORK_ALLOW, reach those package indexes while each runs; every process of the uid is
killed and the network closed when each ends.

With ``RolloutRequest.sandbox_home`` set (upstream's harness: ``/home/user``), that prefix in
commands, environment values, working directories and paths stands for the context's directories:
``HOME/workdir`` is the work dir, ``HOME`` the home.
"""

import asyncio
import contextlib
import re
import shutil
import uuid
from collections.abc import AsyncIterator

from opencode_env_client.models import (
    FINAL,
    PENDING,
    CommandOutcome,
    SandboxCommand,
    SandboxCommandResult,
    SandboxContext,
    SandboxFile,
    SandboxJob,
)

from ..rollouts.agents import OPENCODE_OFFLINE
from ..rollouts.rollout import Rollout
from ..rollouts.verification import LimitExceeded, Untrusted, bounded, enter
from ..sandbox.processes import UidNotEmpty
from ..sandbox.sandbox import Sandbox, SandboxError

READ_LIMIT_BYTES = 4 << 20
SANDBOX_READY_TIMEOUT_S = 60.0
MISSING = 3  # exit code of the read script for a path that does not exist
WRITE_SCRIPT = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
READ_SCRIPT = f'[ -e "$1" ] || exit {MISSING}; head -c {READ_LIMIT_BYTES + 1} -- "$1"'
EXISTS_SCRIPT = 'test -e "$1"'
# What upstream's OpenCode install step makes: its directories, and the binary it probes for.
HOME_DIRS = (".config/opencode", "logs/agent", "logs/verifier", "task", ".opencode/bin")


async def _first(*events: asyncio.Event) -> None:
    """Return once any of ``events`` is set."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


class OperationRefused(RuntimeError):
    """An operation the rollout's state does not allow; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _refusal(exc: Exception) -> OperationRefused:
    """The 409 of an operation whose verification context cannot be entered or held."""
    if isinstance(exc, Untrusted):
        return OperationRefused(409, f"no trusted verification context: {exc}")
    if isinstance(exc, LimitExceeded):
        return OperationRefused(409, f"stopped at the rollout's limit in the verification context: {exc}")
    return OperationRefused(409, f"the work dir could not be copied to the verification context: {exc}")


class SandboxOperations:
    """The sandbox API of one rollout (kept on ``rollout.operations``)."""

    def __init__(self, rollout: Rollout, opencode_bin: str) -> None:
        self.rollout = rollout
        self.opencode_bin = shutil.which(opencode_bin) or opencode_bin
        self.jobs: dict[str, asyncio.subprocess.Process] = {}
        self._setup_lock = asyncio.Lock()
        self._prepared: asyncio.Future | None = None  # the agent sandbox's upstream layout, made once
        self._verification: asyncio.Future | None = None  # entering the verification context, once
        alias = rollout.request.sandbox_home
        self._alias = re.compile(re.escape(alias) + r"(/workdir)?(?![\w.-])") if alias else None

    # --- contexts ------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def context(self) -> AsyncIterator[tuple[Sandbox, SandboxContext]]:
        """The sandbox an operation runs in, for the operation's length: the agent's while the
        rollout runs; once it is final the verification context, held alone (no check or other
        verifier operation at the same time: callers wait their turn) and ``bounded`` (the verifier
        uid emptied before and after, the rollout's limits watched: ``OperationRefused`` 409 past one)."""
        rollout = self.rollout
        waited = 0.0
        while rollout.status == PENDING:  # its sandbox is being made
            if waited >= SANDBOX_READY_TIMEOUT_S:
                raise OperationRefused(503, f"rollout {rollout.id}'s sandbox is not ready after {waited:g}s")
            await asyncio.sleep(0.05)
            waited += 0.05
        if rollout.status not in FINAL:
            await _first(rollout.setup_over, rollout.done)  # the task's setup (and its network) is over
        if rollout.status not in FINAL:
            if self._prepared is None:
                self._prepared = asyncio.ensure_future(self._prepare())
            await asyncio.shield(self._prepared)
            yield rollout.sandbox, "agent"
            return
        async with rollout.verifier_lock:
            if self._verification is None:
                self._verification = asyncio.ensure_future(self._enter_verification())
            await asyncio.shield(self._verification)
            try:
                async with bounded(rollout.harness_context):
                    yield rollout.harness_context, "verification"
            except (Untrusted, LimitExceeded) as exc:
                raise _refusal(exc) from None

    async def _prepare(self) -> None:
        """With ``sandbox_home``, make upstream's layout under the home: the directories its install
        step makes and ``~/.opencode/bin/opencode``, the image's OpenCode, so its install probe passes
        offline."""
        if self._alias is None:
            return
        sandbox = self.rollout.sandbox
        dirs = " ".join(f'"$HOME/{d}"' for d in HOME_DIRS)
        script = f'mkdir -p {dirs} && ln -sfn "$1" "$HOME/.opencode/bin/opencode"'
        run = await sandbox.run(
            "prepare home", 30, env=sandbox.env(), argv=["bash", "-c", script, "bash", self.opencode_bin]
        )
        if run.exit_code != 0:
            raise OperationRefused(409, f"cannot prepare the sandbox's home: {run.stderr[-500:]}")

    async def _enter_verification(self) -> None:
        rollout = self.rollout
        await asyncio.wait({rollout.runner})  # the runner kills the agent's processes as the rollout ends
        try:
            await enter(rollout.sandbox, rollout.harness_context)
        except (Untrusted, SandboxError) as exc:
            raise _refusal(exc) from None

    # --- mapping ---------------------------------------------------------------------------------
    def mapped(self, text: str, sandbox: Sandbox) -> str:
        """``text`` with ``sandbox_home`` (and ``sandbox_home/workdir``) replaced by the context's dirs."""
        if self._alias is None:
            return text
        return self._alias.sub(lambda m: str(sandbox.work if m.group(1) else sandbox.home), text)

    def _env(self, sandbox: Sandbox, context: SandboxContext, extra: dict[str, str]) -> dict[str, str]:
        added = {key: self.mapped(value, sandbox) for key, value in extra.items()}
        return sandbox.env({**OPENCODE_OFFLINE, **added} if context == "agent" else added)

    def _cwd(self, sandbox: Sandbox, cwd: str | None) -> str | None:
        return self.mapped(cwd, sandbox) if cwd else None

    # --- operations ------------------------------------------------------------------------------
    async def exec(self, command: SandboxCommand) -> SandboxCommandResult:
        """Run a command to completion (killed at its timeout); a setup command with the setup network
        open while it runs, and every process of the uid killed after it."""
        async with self.context() as (sandbox, context):
            if command.setup and (context != "agent" or self.jobs):
                raise OperationRefused(409, "setup commands run only before the rollout's first background job")
            if not command.setup:
                return self._result(await self._run(sandbox, context, command), context)
            async with self._setup_lock:  # one window at a time: each closes what it opened
                await self.rollout.open_setup_network()
                try:
                    run = await self._run(sandbox, context, command)
                finally:
                    await self._end_setup()
            return self._result(run, context)

    async def _run(self, sandbox: Sandbox, context: SandboxContext, command: SandboxCommand) -> CommandOutcome:
        return await sandbox.run(
            self.mapped(command.command, sandbox),
            command.timeout_s,
            stdin=command.stdin,
            env=self._env(sandbox, context, command.env),
            cwd=self._cwd(sandbox, command.cwd),
        )

    @staticmethod
    def _result(run: CommandOutcome, context: SandboxContext) -> SandboxCommandResult:
        return SandboxCommandResult(
            exit_code=run.exit_code, stdout=run.stdout, stderr=run.stderr, timed_out=run.timed_out, context=context
        )

    async def write(self, path: str, content: str) -> SandboxFile:
        """Write a text file as the context's uid (parent directories made)."""
        async with self.context() as (sandbox, context):
            run = await self._file_script(sandbox, WRITE_SCRIPT, path, stdin=content)
            if run.exit_code != 0:
                raise OperationRefused(409, f"cannot write {path!r}: {run.stderr.strip()[-500:]}")
            return SandboxFile(path=path, exists=True, context=context)

    async def read(self, path: str) -> SandboxFile:
        """Read a text file as the context's uid (at most ``READ_LIMIT_BYTES``)."""
        async with self.context() as (sandbox, context):
            run = await self._file_script(sandbox, READ_SCRIPT, path, output_bytes=READ_LIMIT_BYTES + 1)
            if run.exit_code == MISSING:
                return SandboxFile(path=path, exists=False, context=context)
            if run.exit_code != 0:
                raise OperationRefused(409, f"cannot read {path!r}: {run.stderr.strip()[-500:]}")
            if len(run.stdout.encode()) > READ_LIMIT_BYTES:
                raise OperationRefused(413, f"{path!r} is larger than {READ_LIMIT_BYTES} bytes")
            return SandboxFile(path=path, exists=True, content=run.stdout, context=context)

    async def exists(self, path: str) -> SandboxFile:
        """Whether ``path`` exists, as the context's uid sees it."""
        async with self.context() as (sandbox, context):
            run = await self._file_script(sandbox, EXISTS_SCRIPT, path)
            return SandboxFile(path=path, exists=run.exit_code == 0, context=context)

    async def _end_setup(self) -> None:
        try:
            await self.rollout.end_setup_phase()
        except UidNotEmpty as exc:
            raise OperationRefused(409, f"the setup command's processes could not be ended: {exc}") from None

    async def _file_script(self, sandbox: Sandbox, script: str, path: str, stdin: str = "", output_bytes: int = 65536):
        target = self.mapped(path, sandbox)
        return await sandbox.run(
            f"{script} ({path})",
            30,
            stdin=stdin,
            env=sandbox.env(),
            argv=["bash", "-c", script, "bash", target],
            output_bytes=output_bytes,
        )

    async def start_job(self, command: SandboxCommand) -> SandboxJob:
        """Start a background command as the agent's uid (only while the rollout runs)."""
        async with self.context() as (sandbox, context):
            if context != "agent":
                raise OperationRefused(
                    409, f"rollout {self.rollout.id} is {self.rollout.status}: no background jobs now"
                )
            devnull = asyncio.subprocess.DEVNULL
            async with self._setup_lock:  # never while a setup command has the network
                process = await sandbox.spawn(
                    ["bash", "-c", self.mapped(command.command, sandbox)],
                    self._env(sandbox, context, command.env),
                    devnull,
                    devnull,
                    cwd=self._cwd(sandbox, command.cwd),
                )
            job_id = uuid.uuid4().hex[:16]
            self.jobs[job_id] = process
            return SandboxJob(job_id=job_id, pid=process.pid, running=True)

    def _job(self, job_id: str) -> asyncio.subprocess.Process:
        if job_id not in self.jobs:
            raise OperationRefused(404, f"no job {job_id!r} in rollout {self.rollout.id}")
        return self.jobs[job_id]

    async def wait_job(self, job_id: str, timeout_s: float) -> SandboxJob:
        """Wait up to ``timeout_s`` for a job to exit."""
        process = self._job(job_id)
        try:
            code = await asyncio.wait_for(asyncio.shield(process.wait()), timeout_s)
        except TimeoutError:
            return SandboxJob(job_id=job_id, pid=process.pid, running=True)
        return SandboxJob(job_id=job_id, pid=process.pid, running=False, exit_code=code)

    async def kill_job(self, job_id: str) -> SandboxJob:
        """SIGKILL a job's process group."""
        process = self._job(job_id)
        Sandbox.kill_group(process.pid)
        return SandboxJob(job_id=job_id, pid=process.pid, running=process.returncode is None)


def operations_of(rollout: Rollout, opencode_bin: str) -> SandboxOperations:
    """The rollout's ``SandboxOperations``, made on first use."""
    if rollout.operations is None:
        rollout.operations = SandboxOperations(rollout, opencode_bin)
    return rollout.operations
