"""Upstream OpenEnv's ``run_rollout`` tool: its arguments as a rollout request, one rollout run to
the end, and upstream's ``RolloutResult``."""

import asyncio
import logging
import time
from typing import Any

import orjson
from opencode_env_client.models import (
    COMPLETED,
    MAX_COMPLETION_TOKENS,
    MAX_TOKENS_PER_TURN,
    STOPPED,
    TIMED_OUT_EXIT,
    CommandResult,
    Limits,
    RolloutRequest,
    RolloutResult,
    RolloutTurn,
    RunRolloutArguments,
    Task,
    Turn,
    Verification,
)

from ..rollouts.rollout import Rollout
from ..sandbox.sandbox import SandboxError
from ..settings import Settings, normalize_upstream
from .service import RolloutService

log = logging.getLogger("opencode_env_server.run_rollout")

TOOL = {
    "name": "run_rollout",
    "description": "Run one OpenCode rollout on a task (instruction, setup and verify commands) in a local "
    "sandbox and return its RolloutResult as JSON: reward = fraction of verify commands passed, "
    "per-turn token ids and logprobs, setup/verify results and the files the agent wrote.",
    "inputSchema": RunRolloutArguments.model_json_schema(),
}
# Upstream's result bounds: files under 64 KB, at most 32, 8000 characters each; 2000-character tails.
MAX_FILES, MAX_FILE_BYTES, MAX_FILE_CHARS, TAIL_CHARS = 32, 64 * 1024, 8000, 2000


def request_for(args: RunRolloutArguments, settings: Settings) -> RolloutRequest:
    """The rollout request ``run_rollout`` stands for; ``ValueError`` when an endpoint lacks its key or model.

    ``endpoint="vllm"`` (or neither endpoint nor ``base_url``) is the stack's inference service;
    ``"openai"`` and ``"hf_router"`` take base URL, key and model from the arguments, else from the
    server's settings. Explicit arguments win. The key is sent upstream only for an external base URL.
    """
    provider = settings.providers.get(args.endpoint)
    base_url = args.base_url or (provider.base_url if provider else "")
    api_key = args.api_key or (provider.api_key if provider else "")
    model = args.model or (provider.model if provider else "")
    internal = not base_url or normalize_upstream(base_url) == normalize_upstream(settings.inference_url)
    if provider is not None and not internal and not (api_key and model):
        prefix = args.endpoint.upper()
        raise ValueError(
            f"endpoint {args.endpoint!r} needs an api_key and a model: pass them, or set "
            f"{prefix}_API_KEY and {prefix}_MODEL on the service"
        )
    disable_thinking = args.endpoint == "vllm" if args.disable_thinking is None else args.disable_thinking
    cap = min(args.max_tokens_cap, MAX_TOKENS_PER_TURN) if args.max_tokens_cap > 0 else MAX_TOKENS_PER_TURN
    limits = Limits(
        wall_s=args.agent_timeout_s,
        max_tokens_per_turn=cap,
        max_turns=settings.run_rollout_max_turns,
        max_completion_tokens=MAX_COMPLETION_TOKENS,
    )
    task = Task(
        task_id=args.task_id,
        instruction=args.instruction,
        setup=list(args.setup or []),
        verify_commands=list(args.verify or []),
        limits=limits,
    )
    transparent = args.mode == "transparent_proxy"
    return RolloutRequest(
        task=task,
        upstream_url=None if internal else base_url,
        upstream_api_key=None if internal else api_key or None,
        model=model or None,
        sampling={"chat_template_kwargs": {"enable_thinking": False}} if disable_thinking else {},
        record_turns=transparent,
        top_logprobs=args.top_logprobs if transparent else None,
    )


async def run(service: RolloutService, args: RunRolloutArguments) -> RolloutResult:
    """Run one rollout to the end (agent, held-out verification, files) and close it, also when cancelled.

    Raises ``ServiceError`` / ``ValueError`` if it cannot start.
    """
    began = time.monotonic()
    rollout = await service.start(request_for(args, service.settings))
    manager = service.manager
    try:
        await asyncio.wait({rollout.runner})
        verification = await manager.verify(rollout)
        try:
            files, skipped = await rollout.sandbox.list_files(max_files=MAX_FILES, max_bytes=MAX_FILE_BYTES)
        except SandboxError as exc:
            log.warning("rollout %s: cannot list its files: %s", rollout.id, exc)
            files, skipped = {}, []
        agent_log = await manager.agent_log(rollout)
    finally:
        closing = asyncio.ensure_future(manager.close(rollout))
        await asyncio.shield(closing)  # a cancelled call still removes the rollout's processes and sandbox
    return result_of(
        rollout,
        args,
        verification,
        {path: text[:MAX_FILE_CHARS] for path, text in files.items()},
        skipped,
        agent_log,
        time.monotonic() - began,
    )


def result_of(
    rollout: Rollout,
    args: RunRolloutArguments,
    verification: Verification,
    files: dict[str, str],
    files_extra: list[str],
    agent_log: str,
    wall_s: float,
) -> RolloutResult:
    """Upstream's ``RolloutResult`` of a finished, verified rollout."""
    return RolloutResult(
        task_id=args.task_id,
        sandbox_id=rollout.id,
        reward=verification.reward,
        agent_exit_code=rollout.agent_exit_code,
        wall_s=round(wall_s, 3),
        mode=args.mode,
        setup_results=[
            CommandResult(
                cmd=r.command,
                exit_code=TIMED_OUT_EXIT if r.exit_code is None else r.exit_code,
                stdout=r.stdout[-TAIL_CHARS:],
                stderr=r.stderr[-TAIL_CHARS:],
                duration_s=round(r.duration_s, 3),
            )
            for r in rollout.setup_results
        ],
        verify_results=[
            CommandResult(
                cmd=r.command or "",
                exit_code=TIMED_OUT_EXIT if r.exit_code is None else r.exit_code,
                stdout=r.stdout,
                stderr=r.stderr,
                duration_s=round(r.duration_s, 3),
            )
            for r in verification.results
            if r.kind == "command"
        ],
        proxy_turns=[_turn(t) for t in rollout.turns],
        files=files,
        files_extra=files_extra,
        agent_log_tail=agent_log[-TAIL_CHARS:],
        error=None if rollout.status in (COMPLETED, STOPPED) else f"{rollout.status}: {rollout.detail}",
    )


def _turn(turn: Turn) -> RolloutTurn:
    return RolloutTurn(
        turn=turn.turn,
        finish_reason=turn.finish_reason,
        completion_tokens=turn.completion_tokens,
        completion_token_ids=turn.completion_token_ids,
        per_token_logps=turn.per_token_logps,
        latency_s=turn.latency_s,
        timestamp=turn.timestamp,
        upstream_status=turn.upstream_status,
        upstream_error=_error_object(turn.upstream_error),
    )


def _error_object(text: str | None) -> dict[str, Any] | None:
    """An upstream error body as upstream's result has it: the JSON object, or the text as ``message``."""
    if text is None:
        return None
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"message": text}
