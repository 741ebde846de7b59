"""Held-out evaluation on OpenCode (an AsyncGRPO config): the held-out coding tasks (never in a
training job), each one rollout of the real agent on ``opencode-env`` with the model the inference
service serves; pass rate (all held-out tests pass) and mean reward."""

import time
from pathlib import Path
from typing import Any

from ..config import ConfigError, TrainerConfig
from ..envs.errors import EnvUnavailable
from .statistics import summary_of


def opencode_evaluation(config: TrainerConfig, label: str) -> dict[str, Any]:
    """Each held-out coding task once on ``opencode-env``, sampled at the training temperature by the
    model the inference service serves; ``{"modes": {"T=...": {"summary", "records"}}}``."""
    import concurrent.futures

    from opencode_env_client import OpenCodeEnvClient, OpenCodeEnvError

    from ..envs.coding_tasks import load_tasks

    oc, inference, ev = config.opencode, config.inference, config.eval
    temperature = ev.temperature
    tasks = load_tasks(Path(oc.tasks) if oc.tasks else None, limits=oc.limits, split="held_out")
    if not tasks:
        raise ConfigError(f'no held-out task in {oc.tasks}: mark the evaluation tasks with "held_out": true')
    began = time.monotonic()
    client = OpenCodeEnvClient(oc.env_url)
    try:
        client.health()
    except OpenCodeEnvError as exc:
        raise EnvUnavailable(f"opencode env at {oc.env_url} unreachable: {exc}") from None

    def one(index: int, task: Any) -> dict[str, Any]:
        created = client.create_rollout(task, sampling={"temperature": temperature}, model=inference.model)
        try:
            summary = client.wait(created.rollout_id, oc.wait_timeout_s)
            verification = client.verify(created.rollout_id)
        finally:
            client.delete(created.rollout_id)
        return {
            "task_id": task.task_id,
            "rollout_id": created.rollout_id,
            "status": summary.status,
            "reward": verification.reward,
            "passed": verification.passed,
            "total": verification.total,
            "correct": verification.reward == 1.0,
            "score": verification.reward or 0.0,
            "index": index,
            "answer": None if verification.reward is None else summary.status,
        }  # answered: scored

    workers = max(1, ev.concurrency)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        records = list(pool.map(one, range(len(tasks)), tasks))
    scored = [r for r in records if r["reward"] is not None]
    mode = f"T={temperature}"
    report = {
        "label": label,
        "tasks": "held_out",
        "unscored": len(records) - len(scored),
        "modes": {mode: {"temperature": temperature, "summary": summary_of(scored), "records": records}},
        "seconds": time.monotonic() - began,
    }
    return report
