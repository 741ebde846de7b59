"""Upstream OpenEnv ``opencode_env`` entry point: the ``run_rollout`` tool and its result shape."""

import json
from typing import Any

from .tasks import Limits, RolloutRequest, Task

RUN_ROLLOUT_TOOL = {
    "name": "run_rollout",
    "description": "Run one OpenCode rollout on a task and return its RolloutResult JSON.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "instruction": {"type": "string"}, "setup": {"type": "array", "items": {"type": "string"}},
            "verify": {"type": "array", "items": {"type": "string"}}, "task_id": {"type": "string"},
            "base_url": {"type": "string"}, "model": {"type": "string"}, "agent_timeout_s": {"type": "number"},
            "max_tokens_cap": {"type": "integer"}, "disable_thinking": {"type": "boolean"},
        },
        "required": ["instruction"],
    },
}
# Upstream arguments that select cloud sandboxes or proxy modes; accepted and ignored here.
IGNORED = {"endpoint", "api_key", "mode", "top_logprobs", "template"}


def request_from_arguments(arguments: dict[str, Any]) -> RolloutRequest:
    """Map upstream ``run_rollout`` arguments onto a rollout request (ValueError on bad input)."""
    unknown = set(arguments) - set(RUN_ROLLOUT_TOOL["inputSchema"]["properties"]) - IGNORED
    if unknown:
        raise ValueError(f"run_rollout: unknown arguments {sorted(unknown)}")
    limits = Limits(wall_s=float(arguments.get("agent_timeout_s", 600.0)),
                    max_tokens_per_turn=int(arguments.get("max_tokens_cap", 4096)))
    task = Task(task_id=arguments.get("task_id", ""), instruction=arguments.get("instruction", ""),
                setup=list(arguments.get("setup") or []), verify_commands=list(arguments.get("verify") or []),
                limits=limits)
    sampling = {"chat_template_kwargs": {"enable_thinking": False}} if arguments.get("disable_thinking") else {}
    return RolloutRequest(task=task, upstream_url=arguments.get("base_url") or None,
                          model=arguments.get("model") or None, sampling=sampling)


def rollout_result(summary: dict[str, Any], verification: dict[str, Any], turns: list[dict[str, Any]],
                   files: dict[str, str], agent_log: str) -> str:
    """Upstream's RolloutResult JSON."""
    started, finished = summary.get("created_at"), summary.get("finished_at")
    return json.dumps({
        "task_id": summary.get("task_id"), "sandbox_id": summary.get("rollout_id"),
        "reward": verification.get("reward"), "agent_exit_code": summary.get("agent_exit_code"),
        "wall_s": (finished - started) if started and finished else None, "mode": "transparent_proxy",
        "setup_results": [{"cmd": r["command"], "exit_code": r["exit_code"], "stdout": r["stdout"],
                           "stderr": r["stderr"], "duration_s": r["duration_s"]} for r in summary.get("setup_results", [])],
        "verify_results": [{"cmd": r.get("command", ""), "exit_code": r["exit_code"], "stdout": r["stdout"],
                            "stderr": r["stderr"], "duration_s": None} for r in verification.get("results", [])],
        "proxy_turns": [{
            "turn": t["turn"], "finish_reason": t["finish_reason"], "completion_tokens": len(t["completion_token_ids"]),
            "completion_token_ids": t["completion_token_ids"], "per_token_logps": t["per_token_logps"],
            "prompt_token_ids": t["prompt_token_ids"], "latency_s": t["latency_s"], "timestamp": t["timestamp"],
            "upstream_status": t["upstream_status"], "upstream_error": t["upstream_error"]} for t in turns],
        "files": files, "files_extra": {}, "agent_log_tail": agent_log[-2000:], "proxy_log_tail": "",
        "error": summary.get("detail") if summary.get("status") in ("infra_failure", "setup_failed") else None,
    })
