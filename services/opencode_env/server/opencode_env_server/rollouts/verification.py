"""Held-out checks in a context the agent could not prepare, bounded like the agent phase.

When the agent is done: every process of its uid is killed until ``/proc`` shows none left, and
its System V objects are removed. The checks then run in a fresh sandbox of the seat's *verifier*
uid (``VERIFIER_UID_BASE + seat``, a uid no agent ever runs as; its network is closed entirely):
its own HOME and TMPDIR, a clean environment with PATH fixed by the service, no user site-packages,
no shell start-up files, no git configuration but the repository's. The agent's work dir reaches
the checks as a copy of its directories and regular files only (no links, no ``.git``, a file with
several names once, at most ``disk_mb`` by apparent size), read as the agent's uid and written as
the verifier's; nothing else the agent left (its HOME, TMPDIR, processes) is in play.

Each check (and each operation of a harness's verifier, ``sandbox_operations``) runs ``bounded``:
the verifier uid is emptied before and after it (the same thread-level ``/proc`` proof as the
agent's uid), the rollout's memory and disk limits are watched while it runs (the disk of the whole
verification directory, the copy included, against ``disk_mb``), its command is a root-owned script
that exists only while it runs, and all checks together get the rollout's ``wall_s``. A check that
passes a limit is stopped with the rest of the uid, fails, and ends the verification: it and every
check after it count as failed and the verification's status is ``limit_exceeded``.

What remains: a check that imports or executes the agent's code runs that code inside the check,
which can then do anything the check can (exit 0, patch the test framework, read the check's own
files, leave files in the work dir for later checks). Output-compared tests (``Task.tests``) are the
kind it cannot fool: the expected output never enters a sandbox, the service compares.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from opencode_env_client.models import CheckResult, CommandOutcome, Task, TestCase

from ..sandbox import usage
from ..sandbox.processes import UidNotEmpty
from ..sandbox.sandbox import CopyTooLarge, Sandbox, SandboxError

log = logging.getLogger("opencode_env_server.verification")
CHECK_LOG_CHARS = 2000
# The checks' watchdog looks more often than the agent's (a check is short, and its context small):
# memory every 0.25 s, disk every 0.5 s.
WATCH_INTERVAL_S = 0.25
WATCH_DISK_EVERY = 2


def check_env(context: Sandbox) -> dict[str, str]:
    """The checks' environment: the context's fresh HOME and TMPDIR, nothing inherited."""
    return context.env(
        {
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
        }
    )


def output_matches(case: TestCase, stdout: str) -> bool:
    """Whether a program's ``stdout`` is ``case``'s expected output under its ``compare`` mode."""
    expected = case.expected_stdout
    if case.compare == "exact":
        return stdout == expected
    if case.compare == "lines":

        def lines(text: str) -> list[str]:
            return [line.rstrip() for line in text.rstrip().split("\n")]

        return lines(stdout) == lines(expected)
    if case.compare == "tokens":
        return stdout.split() == expected.split()
    return stdout.strip() == expected.strip()


def _result(kind: str, passed: bool, run: CommandOutcome, limit: str | None = None, **where) -> CheckResult:
    return CheckResult(
        kind=kind,
        passed=passed and limit is None,
        exit_code=run.exit_code,
        timed_out=run.timed_out,
        stdout=run.stdout[-CHECK_LOG_CHARS:],
        stderr=run.stderr[-CHECK_LOG_CHARS:],
        duration_s=run.duration_s,
        limit=limit,
        **where,
    )


@dataclass(frozen=True)
class Check:
    """One held-out check: how it is reported and what it runs."""

    kind: str
    command: str
    script: str  # the name of its root-owned script, beside the work dir while it runs
    where: dict
    stdin: str = ""
    case: TestCase | None = None  # an output-compared test's case

    def result(self, run: CommandOutcome, limit: str | None = None) -> CheckResult:
        passed = run.exit_code == 0 and (self.case is None or output_matches(self.case, run.stdout))
        return _result(self.kind, passed, run, limit, **self.where)


def checks_of(task: Task) -> list[Check]:
    """``task``'s held-out checks in the order they run: its tests, then its verify commands."""
    tests = [
        Check("test", task.test_command, "test.sh", {"index": i}, case.stdin, case) for i, case in enumerate(task.tests)
    ]
    commands = [Check("command", c, f"verify-{i}.sh", {"command": c}) for i, c in enumerate(task.verify_commands)]
    return tests + commands


def _not_run(checks: list[Check], reason: str, limit: str | None = None) -> list[CheckResult]:
    """``checks`` failed without running (or without ending), for ``reason``."""
    run = CommandOutcome(command="", exit_code=None, stdout="", stderr=reason, duration_s=0.0)
    return [_result(c.kind, False, run, limit, **c.where) for c in checks]


@dataclass
class Checked:
    """What the checks gave: one result per check, and the limit verification was stopped at."""

    results: list[CheckResult] = field(default_factory=list)
    limit: str | None = None


class Untrusted(RuntimeError):
    """The checks cannot run in a trusted context (a uid's processes survive): no reward."""


class LimitExceeded(RuntimeError):
    """What ran in a verification context passed one of the rollout's limits and was stopped."""


async def enter(agent: Sandbox, context: Sandbox) -> None:
    """Make ``context`` (the seat's verifier uid) the trusted place to judge ``agent``'s work: every
    process of the agent's uid killed, a fresh directory, a copy of the work dir. Raises ``Untrusted``
    if a uid cannot be emptied, ``CopyTooLarge`` or ``SandboxError`` if the work dir cannot be copied."""
    try:
        await asyncio.to_thread(agent.kill_all)
        await asyncio.to_thread(context.create)
    except UidNotEmpty as exc:
        raise Untrusted(str(exc)) from None
    await asyncio.to_thread(usage.remove_sysv_objects, agent.uid)
    await agent.copy_work_to(context)


@contextlib.asynccontextmanager
async def bounded(context: Sandbox) -> AsyncIterator[None]:
    """Run the body as the only thing of ``context``'s uid, under the rollout's memory and disk
    limits: the uid emptied before and after (its processes, then its System V objects), a watchdog
    meanwhile (it kills the uid at a limit), and disk measured once more at the end.
    Raises ``Untrusted`` if the uid cannot be emptied, ``LimitExceeded`` (after the body) if a limit
    was passed."""
    try:
        await asyncio.to_thread(context.kill_all)
        context.violation = None
        watchdog = asyncio.create_task(context.watch(WATCH_INTERVAL_S, WATCH_DISK_EVERY))
        try:
            yield
        finally:
            watchdog.cancel()
            await asyncio.to_thread(context.kill_all)
            await asyncio.to_thread(usage.remove_sysv_objects, context.uid)  # they outlive processes
    except UidNotEmpty as exc:
        raise Untrusted(str(exc)) from None
    # The uid is empty now: what it still holds is on disk.
    violation = context.violation or await asyncio.to_thread(context.over_limits, memory=False)
    if violation:
        raise LimitExceeded(violation)


async def run_checks(agent: Sandbox, context: Sandbox, task: Task) -> Checked:
    """Run ``task``'s held-out checks on ``agent``'s work dir in the fresh ``context`` (the seat's
    verifier uid), each ``bounded`` and all within ``wall_s``, then remove the context. Raises
    ``Untrusted`` if a uid cannot be emptied."""
    checks = checks_of(task)
    if not checks:
        return Checked()
    try:
        try:
            await enter(agent, context)
        except CopyTooLarge as exc:
            limit = f"work dir copy: {exc}"
            return Checked(_not_run(checks, limit, limit), limit)
        except SandboxError as exc:
            return Checked(_not_run(checks, f"the work dir could not be copied to the checks: {exc}"))
        return await _run_all(context, task, checks)
    finally:
        await asyncio.to_thread(_remove, context)


async def _run_all(context: Sandbox, task: Task, checks: list[Check]) -> Checked:
    env = check_env(context)
    checked = Checked()
    try:
        async with asyncio.timeout(task.limits.wall_s):
            for check in checks:
                try:
                    async with bounded(context):
                        argv = _script(context, check.script, check.command)
                        try:
                            run = await context.run(
                                check.command, task.test_timeout_s, stdin=check.stdin, env=env, argv=argv
                            )
                        finally:
                            (context.dir / check.script).unlink(missing_ok=True)
                except LimitExceeded as exc:
                    checked.limit = str(exc)
                    checked.results.append(check.result(run, checked.limit))
                    break
                checked.results.append(check.result(run))
    except TimeoutError:  # ``bounded`` has emptied the uid on the way out
        checked.limit = f"wall-clock limit: the checks took longer than {task.limits.wall_s:g}s"
        stopped = checks[len(checked.results)]
        checked.results += _not_run([stopped], "stopped at the wall-clock limit", checked.limit)
    if checked.limit is not None:
        done = len(checked.results)
        checked.results += _not_run(checks[done:], f"not run: verification stopped at a limit ({checked.limit})")
    return checked


def _script(context: Sandbox, name: str, command: str) -> list[str]:
    """A check's command as a script only the verifier uid reads, and the command line that runs it
    (no start-up files: ``--noprofile --norc``; the clean environment sets no ``BASH_ENV``)."""
    context.write_private(name, command.encode(), 0o440)
    return ["bash", "--noprofile", "--norc", f"../{name}"]  # from the work dir: no path above the context


def _remove(context: Sandbox) -> None:
    try:
        context.destroy()
    except (UidNotEmpty, OSError) as exc:  # the seat's next checks kill again; the rollout's close removes
        log.warning("checks of %s: cleaning up: %s", context.dir.name, exc)
