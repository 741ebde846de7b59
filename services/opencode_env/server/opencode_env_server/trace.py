"""Per-turn records of a rollout's model calls, and the training trace built from them."""

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import orjson


@dataclass
class Turn:
    """One model call through the proxy, with what the engine saw and sampled."""

    turn: int
    request: dict[str, Any]
    response: dict[str, Any]
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    per_token_logps: list[float]
    finish_reason: Optional[str]
    latency_s: float
    weight_version: Optional[str]
    stream: bool
    trainable: bool  # False for calls without tools (title, summary, compaction)
    prefix_consistent: Optional[bool] = None  # None on the first turn
    upstream_status: int = 200
    upstream_error: Optional[str] = None
    timestamp: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        """The engine answered and returned token ids for prompt and completion."""
        return self.upstream_status < 400 and bool(self.prompt_token_ids) and self.upstream_error is None


def extends(previous: Optional[Turn], prompt_ids: list[int]) -> Optional[bool]:
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
        rows.append({
            "node_id": f"{rollout_id}:{t.turn}",
            "prompt_token_ids": t.prompt_token_ids,
            "completion_token_ids": t.completion_token_ids,
            "per_token_logps": t.per_token_logps,
            "loss_mask": mask,
            "request": t.request,
            "response": t.response,
            "metadata": {
                "turn": t.turn, "trainable": t.trainable, "prefix_consistent": t.prefix_consistent,
                "finish_reason": t.finish_reason, "weight_version": t.weight_version, "latency_s": t.latency_s,
            },
        })
    return {"schema_version": 1, "turns": rows}


class TraceStore:
    """JSONL files on the traces volume: ``<id>.turns.jsonl`` (one turn a line) and ``<id>.json``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def append_turn(self, rollout_id: str, turn: Turn) -> None:
        """Persist one turn as soon as it is recorded."""
        with open(self.root / f"{rollout_id}.turns.jsonl", "ab") as f:
            f.write(orjson.dumps(turn) + b"\n")  # orjson serialises dataclasses without copying them

    def write_summary(self, rollout_id: str, summary: dict[str, Any]) -> None:
        """Replace the rollout's summary (status, reward, limits) atomically."""
        tmp = self.root / f".{rollout_id}.json.tmp"
        tmp.write_text(json.dumps(summary))
        tmp.rename(self.root / f"{rollout_id}.json")

    def load(self, rollout_id: str) -> Optional[tuple[dict[str, Any], list[Turn]]]:
        """A rollout written before, e.g. by a previous run of the service."""
        summary_path = self.root / f"{rollout_id}.json"
        if "/" in rollout_id or not summary_path.exists():
            return None
        turns_path = self.root / f"{rollout_id}.turns.jsonl"
        turns = [Turn(**json.loads(line)) for line in turns_path.read_text().splitlines()] if turns_path.exists() else []
        return json.loads(summary_path.read_text()), turns
