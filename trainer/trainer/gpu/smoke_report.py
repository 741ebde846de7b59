"""``python -m trainer.gpu.smoke_report OUTPUT_DIR``: what a smoke run of a training job left in its
output folder, as ``key=value`` lines for ``make gpu-smoke`` (which decides each stage's verdict from
them, not from log prose):

- ``steps``: optimizer steps the job finished (0: no ``summary.json``, the job did not finish);
- ``nccl_group``: ``formed`` when TRL's trainer joined the NCCL group with the vLLM server;
- ``weights_reached``: the end-of-run probe's verdict (``true``/``false``; ``unknown`` without one):
  true only when the last step moved the weights (``weights_moved``) and the sync carried the move,
  with ``gap_before`` and ``gap_after``, the largest server/trainer logprob gaps around the last sync;
- ``zero_std_groups``: the last step's fraction of GRPO groups whose rewards were all equal (1: the
  step had no learning signal, so the weights could not move).
"""

import json
import sys
from pathlib import Path
from typing import Any

# Written by the GRPO job once TRL's trainer joined the NCCL group with the vLLM server.
NCCL_GROUP_FILE = "nccl_group.json"


def report(output_dir: Path) -> dict[str, Any]:
    """The facts above, from ``output_dir``."""
    summary_path = output_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    probe = summary.get("weights_probe") or {}
    facts: dict[str, Any] = {
        "steps": summary.get("steps", 0),
        "nccl_group": "formed" if (output_dir / NCCL_GROUP_FILE).is_file() else "absent",
        "weights_reached": {True: "true", False: "false"}.get(probe.get("reached"), "unknown"),
    }
    if "moved" in probe:
        facts["weights_moved"] = "true" if probe["moved"] else "false"
    for key in ("gap_before_sync", "gap_after_sync"):
        if key in probe:
            facts[key.removesuffix("_sync")] = f"{probe[key]:.2e}"
    zero_std = last_logged(output_dir / "metrics.jsonl", "frac_reward_zero_std")
    if zero_std is not None:
        facts["zero_std_groups"] = f"{zero_std:g}"
    return facts


def last_logged(metrics_path: Path, key: str) -> float | None:
    """The last value of ``key`` in a job's ``metrics.jsonl`` (None: never logged)."""
    if not metrics_path.is_file():
        return None
    values = [json.loads(line).get(key) for line in metrics_path.read_text().splitlines() if line.strip()]
    numbers = [v for v in values if isinstance(v, (int, float))]
    return float(numbers[-1]) if numbers else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m trainer.gpu.smoke_report OUTPUT_DIR", file=sys.stderr)
        return 2
    for key, value in report(Path(args[0])).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
