"""A coding agent run as one CLI process in a rollout's sandbox (every agent but OpenCode's server)."""

import asyncio

from opencode_env_client.models import FINAL

from .agents import Agent
from .rollout import Rollout


class AgentNotStarted(RuntimeError):
    """The agent's program could not be started."""


async def run_cli(rollout: Rollout, agent: Agent, proxy: str) -> int | None:
    """Run ``agent`` on the rollout's task, its output to the agent log; its exit code, or None when
    the rollout ended first (a limit or the client: ``Rollout.stop`` killed its processes)."""
    sandbox = rollout.sandbox
    env = agent.environment(sandbox, proxy, rollout.key, rollout.limits.max_tokens_per_turn)
    with sandbox.open_log() as log:
        try:
            process = await sandbox.spawn(
                agent.command(rollout.task.instruction, proxy), env, log, asyncio.subprocess.STDOUT
            )
        except OSError as exc:
            raise AgentNotStarted(f"{agent.name}: {exc}") from None
        exited = asyncio.ensure_future(process.wait())
        ended = asyncio.ensure_future(rollout.done.wait())
        try:
            await asyncio.wait({exited, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
        if rollout.status in FINAL and not exited.done():
            exited.cancel()
            return None
        return exited.result()
