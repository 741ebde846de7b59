"""A user's hooks for the async-grpo job (mounted into the trainer, on its PYTHONPATH): each records
its calls in /outputs/hooks.jsonl so the test sees what the job gave it."""

import json

LOG = "/outputs/hooks.jsonl"


def _log(hook: str, **data) -> None:
    with open(LOG, "a") as f:
        f.write(json.dumps({"hook": hook, **data}) + "\n")


def verifier(sandbox, task):
    """Run the agent's solution.py on one input, in the sandbox the job hands over (after the agent)."""
    uid = sandbox.exec("id -u").stdout.strip()
    out = sandbox.exec("printf 'abc\\n' | python3 solution.py").stdout.strip()
    score = 0.75 if out == "cba" else 0.25
    _log("verifier", uid=int(uid), task_id=task.task_id, score=score)
    return score


def reward(outcome):
    _log("rollout_reward_fn", env_reward=outcome.env_reward)
    return outcome.env_reward - 0.5


def agent_turns(entries):
    _log("agent_turn_fn", entries=len(entries))
    return entries


def train_turn(turn):
    _log("train_turn_fn", tools=bool(turn.tools), tool_calls=len(turn.tool_calls))
    return True
