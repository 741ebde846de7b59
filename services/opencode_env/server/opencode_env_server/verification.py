"""Held-out checks in a context the agent could not prepare.

When the agent is done: every process of its uid is killed until ``/proc`` shows none left, and
its System V objects are removed. The checks then run in a fresh sandbox of the seat's *verifier*
uid (``VERIFIER_UID_BASE + seat``, a uid no agent ever runs as; its network is closed entirely):
its own HOME and TMPDIR, a clean environment with PATH fixed by the service, no user site-packages,
no shell start-up files, no git configuration but the repository's. The agent's work dir reaches
the checks as a copy of its directories and regular files only (no links, no ``.git``), read as the
agent's uid and written as the verifier's; nothing else the agent left (its HOME, TMPDIR, processes)
is in play. Each check's command is a root-owned script, never in an environment variable.

What remains: a check that imports or executes the agent's code runs that code inside the check,
which can then do anything the check can (exit 0, patch the test framework, read the check's own
files). Output-compared tests (``Task.tests``) are the kind it cannot fool: the expected output
never enters a sandbox, the service compares.
"""

import asyncio
import logging

from opencode_env_client.models import CheckResult, CommandOutcome, Task, TestCase

from . import usage
from .processes import UidNotEmpty
from .sandbox import Sandbox, SandboxError

log = logging.getLogger("opencode_env_server.verification")
CHECK_LOG_CHARS = 2000


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


def _result(kind: str, passed: bool, run: CommandOutcome, **where) -> CheckResult:
    return CheckResult(
        kind=kind,
        passed=passed,
        exit_code=run.exit_code,
        timed_out=run.timed_out,
        stdout=run.stdout[-CHECK_LOG_CHARS:],
        stderr=run.stderr[-CHECK_LOG_CHARS:],
        duration_s=run.duration_s,
        **where,
    )


def _all_failed(task: Task, reason: str) -> list[CheckResult]:
    """Every check failed for ``reason`` (the work dir could not be carried over to them)."""
    run = CommandOutcome(command="", exit_code=None, stdout="", stderr=reason, duration_s=0.0)
    return [_result("test", False, run, index=i) for i in range(len(task.tests))] + [
        _result("command", False, run, command=c) for c in task.verify_commands
    ]


class Untrusted(RuntimeError):
    """The checks cannot run in a trusted context (the agent's processes survive): no reward."""


async def enter(agent: Sandbox, context: Sandbox) -> None:
    """Make ``context`` (the seat's verifier uid) the trusted place to judge ``agent``'s work: every
    process of the agent's uid killed, a fresh directory, a copy of the work dir. Raises ``Untrusted``
    if the agent's uid cannot be emptied, ``SandboxError`` if the work dir cannot be copied."""
    try:
        await asyncio.to_thread(agent.kill_all)
        await asyncio.to_thread(context.create)
    except UidNotEmpty as exc:
        raise Untrusted(str(exc)) from None
    await asyncio.to_thread(usage.remove_sysv_objects, agent.uid)
    await agent.copy_work_to(context)


async def run_checks(agent: Sandbox, context: Sandbox, task: Task) -> list[CheckResult]:
    """Run ``task``'s held-out checks on ``agent``'s work dir in the fresh ``context`` (the seat's
    verifier uid), then remove the context. Raises ``Untrusted`` if the agent's uid cannot be emptied."""
    if not task.tests and not task.verify_commands:
        return []
    try:
        try:
            await enter(agent, context)
        except SandboxError as exc:
            return _all_failed(task, f"the work dir could not be copied to the checks: {exc}")
        env = check_env(context)
        results = []
        if task.tests:
            script = _script(context, "test.sh", task.test_command)
            for i, case in enumerate(task.tests):
                run = await context.run(task.test_command, task.test_timeout_s, stdin=case.stdin, env=env, argv=script)
                results.append(_result("test", run.exit_code == 0 and output_matches(case, run.stdout), run, index=i))
        for i, command in enumerate(task.verify_commands):
            script = _script(context, f"verify-{i}.sh", command)
            run = await context.run(command, task.test_timeout_s, env=env, argv=script)
            results.append(_result("command", run.exit_code == 0, run, command=command))
        return results
    finally:
        await asyncio.to_thread(_remove, context)


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
