"""Per-turn records of a rollout's model calls, and the training trace built from them."""

import json
import os
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson
from opencode_env_client.models import Turn


def extends(previous: Turn | None, prompt_ids: list[int]) -> bool | None:
    """Whether ``prompt_ids`` starts with the previous turn's prompt + completion ids exactly."""
    if previous is None or not previous.ok:
        return None
    context = previous.prompt_token_ids + previous.completion_token_ids
    return prompt_ids[: len(context)] == context


def training_trace(turns: list[Turn], rollout_id: str) -> dict[str, Any]:
    """OpenEnv's ``TrainingTrace`` (schema 1), as TRL 1.16's harness worker consumes it.

    Every successful engine call is one turn; the loss mask covers prompt + completion, 0 on the
    prompt and, for trainable calls, 1 on the completion.
    """
    rows = []
    for t in turns:
        if not t.ok:
            continue
        mask = [0] * len(t.prompt_token_ids) + [1 if t.trainable else 0] * len(t.completion_token_ids)
        rows.append(
            {
                "node_id": f"{rollout_id}:{t.turn}",
                "prompt_token_ids": t.prompt_token_ids,
                "completion_token_ids": t.completion_token_ids,
                "per_token_logps": t.per_token_logps,
                "loss_mask": mask,
                "request": t.request,
                "response": t.response,
                "metadata": {
                    "turn": t.turn,
                    "trainable": t.trainable,
                    "prefix_consistent": t.prefix_consistent,
                    "finish_reason": t.finish_reason,
                    "weight_version": t.weight_version,
                    "latency_s": t.latency_s,
                },
            }
        )
    return {"schema_version": 1, "turns": rows}


class TraceStore:
    """JSONL files on the traces volume: ``<id>.turns.jsonl`` (one turn a line) and ``<id>.json``.

    The folder is root-only (0700, files 0600): traces hold held-out verify commands and results.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o700)

    def _open(self, name: str, flags: int):
        return os.fdopen(os.open(self.root / name, flags | os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600), "wb")

    def append_turn(self, rollout_id: str, turn: Turn) -> None:
        """Persist one turn as soon as it is recorded."""
        with self._open(f"{rollout_id}.turns.jsonl", os.O_APPEND) as f:
            f.write(orjson.dumps(turn) + b"\n")  # orjson serialises dataclasses without copying them

    def write_summary(self, rollout_id: str, summary: dict[str, Any]) -> None:
        """Replace the rollout's summary (status, reward, limits) atomically."""
        with self._open(f".{rollout_id}.json.tmp", os.O_TRUNC) as f:
            f.write(orjson.dumps(summary))
        os.rename(self.root / f".{rollout_id}.json.tmp", self.root / f"{rollout_id}.json")

    def load(self, rollout_id: str) -> tuple[dict[str, Any], list[Turn]] | None:
        """A rollout written before, e.g. by a previous run of the service."""
        summary_path = self.root / f"{rollout_id}.json"
        if "/" in rollout_id or rollout_id.startswith(".") or not summary_path.exists():
            return None
        turns_path = self.root / f"{rollout_id}.turns.jsonl"
        turns = (
            [Turn(**json.loads(line)) for line in turns_path.read_text().splitlines()] if turns_path.exists() else []
        )
        return json.loads(summary_path.read_text()), turns

    def mark_unfinished(self, final: Collection[str], status: str, detail: str) -> int:
        """Give every summary whose status is not in ``final`` the status ``status``; returns how many."""
        marked = 0
        for path in self.root.glob("*.json"):
            try:
                summary = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if summary.get("status") not in final:
                summary.update(status=status, final=True, detail=detail, infra_failure=True, finished_at=time.time())
                self.write_summary(path.stem, summary)
                marked += 1
        return marked
