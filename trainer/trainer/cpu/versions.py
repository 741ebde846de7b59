"""Which weights sampled a row, and those weights kept to score it under: the policy versions the
CPU loop has published, and the match of a row to the proxy's per-turn record."""

import copy
import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class PolicyVersions:
    """The weights of the last ``keep`` policy versions by the inference server's version name, to
    score rows under the weights that sampled them."""

    def __init__(self, model: Any, keep: int) -> None:
        self.scratch = copy.deepcopy(model).eval()
        self.keep = keep
        self.states: dict[str, dict[str, Any]] = {}
        self.index: dict[str, int] = {}  # version name -> trainer step that made it

    def add(self, name: str, step: int, model: Any) -> None:
        self.states[name] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.index[name] = step
        for old in sorted(self.states, key=self.index.__getitem__)[: -self.keep]:
            del self.states[old]

    def staleness(self, step: int, names: list[str]) -> int:
        """Optimizer steps between the oldest of ``names`` and the weights step ``step`` starts from."""
        return step - 1 - min(self.index[v] for v in names)

    def model(self, name: str) -> Any:
        self.scratch.load_state_dict(self.states[name])
        return self.scratch


class SampledBy:
    """Which weights sampled each trained token of a row: the ``weight_version`` the proxy recorded on
    the turn that sampled it.

    TRL tags a row with the policy version current when its group was created, but a rollout may
    wait for a sandbox seat and sample after the next reload; the proxy's record is exact. A row is
    matched to its rollout (the group's rollouts in ``sessions.jsonl``) by its sampled ids and the
    logprobs recorded with them.
    """

    def __init__(self, env_url: str, sessions_path: Path) -> None:
        self.env_url = env_url
        self.sessions_path = sessions_path
        self._clients: dict[str, Any] = {}  # by replica URL
        self._turns: dict[str, list[Any]] = {}

    def versions(self, sample: Any) -> list[str | None] | None:
        """One version name per masked token of ``sample``; None when no rollout matches."""
        mask = sample.completion_mask.astype(bool)
        ids = [int(t) for t in sample.input_ids[mask]]
        logps = [float(v) for v in sample.old_log_probs[mask]]
        for rollout_id, env_url in self._group_rollouts(sample.group_id):
            turns = [t for t in self._rollout_turns(rollout_id, env_url) if t.ok and t.completion_token_ids]
            per_token = [
                (i, lp, t.weight_version) for t in turns for i, lp in zip(t.completion_token_ids, t.per_token_logps)
            ]
            for start in range(len(per_token) - len(ids) + 1):
                window = per_token[start : start + len(ids)]
                if [w[0] for w in window] == ids and all(abs(w[1] - lp) < 1e-6 for w, lp in zip(window, logps)):
                    return [w[2] for w in window]
        return None

    def _group_rollouts(self, group_id: int) -> list[tuple[str, str]]:
        """(rollout id, URL of the replica that ran it) of the group's rollouts."""
        rows = [json.loads(line) for line in self.sessions_path.read_text().splitlines() if line.strip()]
        return [(r["rollout_id"], r.get("env_url") or self.env_url) for r in rows if r.get("group") == group_id]

    def _rollout_turns(self, rollout_id: str, env_url: str) -> list[Any]:
        """The rollout's recorded turns; none when its replica is gone (the row is then dropped, unmatched)."""
        from opencode_env_client import OpenCodeEnvClient, OpenCodeEnvError

        if rollout_id not in self._turns:
            if env_url not in self._clients:
                self._clients[env_url] = OpenCodeEnvClient(env_url, timeout_s=60)
            try:
                self._turns[rollout_id] = self._clients[env_url].turns(rollout_id)
            except OpenCodeEnvError as exc:
                log.warning(
                    "rollout %s: its turns cannot be read from %s (%s); its rows are dropped", rollout_id, env_url, exc
                )
                return []
        return self._turns[rollout_id]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
