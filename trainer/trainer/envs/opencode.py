"""The OpenCode env service as TRL's harness sees it: a session factory that also records each
rollout it starts, and the capacity check a job makes before it starts rollouts."""

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from opencode_env_client import OpenCodeServiceSessionFactory, ReplicaPool

from ..config import ConfigError
from .errors import EnvUnavailable
from .turn_selection import SelectedTurnsSession

log = logging.getLogger(__name__)


class RecordingSessionFactory(OpenCodeServiceSessionFactory):
    """The OpenCode session factory, also appending each rollout it starts to ``sessions.jsonl`` (with the
    replica that runs it: its trace is read from there), and applying the ``agent_turn_fn`` and
    ``train_turn_fn`` hooks to each rollout's training trace (``turn_selection``)."""

    def __init__(
        self,
        *args: Any,
        record_path: str | None = None,
        agent_turn_fn: Callable | None = None,
        train_turn_fn: Callable | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.record_path = record_path
        self.agent_turn_fn = agent_turn_fn
        self.train_turn_fn = train_turn_fn
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> Any:
        session = super().create(task, seed=seed, episode_id=episode_id)
        if self.record_path:
            with self._lock, open(self.record_path, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "rollout_id": session.rollout_id,
                            "task_id": session.task_id,
                            "group": seed,
                            "episode_id": episode_id,
                            "env_url": session.client.base_url,
                            "time": time.time(),
                        }
                    )
                    + "\n"
                )
        log.info("rollout %s started (task %s, group %s)", session.rollout_id, session.task_id, seed)
        if self.agent_turn_fn is None and self.train_turn_fn is None:
            return session
        return SelectedTurnsSession(session, self.agent_turn_fn, self.train_turn_fn)


def check_capacity(env_url: str, inflight: int) -> None:
    """Refuse to start when opencode-env (all its replicas together) runs fewer rollouts at once than
    the worker keeps in flight (the rest would get 503 and TRL would drop them from their groups)."""
    pool = ReplicaPool(env_url, timeout_s=30)
    try:
        replicas = pool.health()
    finally:
        pool.close()
    if not replicas:
        raise EnvUnavailable(
            f"opencode-env at {env_url} does not answer (no replica of {pool.addresses()} answers /health)"
        )
    capacity = sum(h.max_rollouts for h in replicas.values())
    if inflight > capacity:
        raise ConfigError(
            f"async_grpo.max_inflight_tasks is {inflight} but opencode-env at {env_url} runs "
            f"{capacity} rollouts at once ({len(replicas)} replica(s), MAX_CONCURRENT_ROLLOUTS each): "
            f"raise it, add replicas, or lower max_inflight_tasks"
        )
