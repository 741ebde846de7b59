"""What a user reads and keeps from a run: the per-step line, a reward plot (PNG) and the summary."""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# TRL's log keys, in the order the step line shows them.
STEP_FIELDS = (
    ("reward", "reward {:.3f}"),
    ("reward_std", "± {:.3f}"),
    ("loss", "loss {:.3g}"),
    ("kl", "kl {:.3g}"),
    ("completions/mean_length", "len {:.1f}"),
    ("questions", "{:.0f} questions"),
    ("staleness_max", "staleness {:.0f}"),
    ("logprob_max_diff", "logprob diff {:.1e}"),
)


def format_step(step: int, total: int, record: dict[str, Any]) -> str:
    """``step 3/5 | reward 0.250 ± 0.433 | loss 0.012 | len 21.0 | 48 tok/s | 9.8 s | GPU peak 21.3 GiB |
    weights step-3``."""
    parts = [f"step {step}/{total}"]
    for key, fmt in STEP_FIELDS:
        value = record.get(key)
        if isinstance(value, (int, float)) and not math.isnan(value):
            parts.append(fmt.format(value))
    if record.get("tokens_per_s") is not None:
        parts.append(f"{record['tokens_per_s']:.0f} tok/s")
    if record.get("step_time_s") is not None:
        parts.append(f"{record['step_time_s']:.1f} s")
    if record.get("gpu_max_reserved_gib") is not None:
        parts.append(f"GPU peak {record['gpu_max_reserved_gib']:.1f} GiB")
    if record.get("weight_version") is not None:
        parts.append(f"weights {record['weight_version']}")
    # "reward 0.25 | ± 0.43": the std belongs to the mean
    return " | ".join(parts).replace(" | ±", " ±")


def trailing_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of each value and the up to ``window - 1`` values before it."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_rewards(
    records: list[dict[str, Any]], path: Path, title: str, held_out: tuple[str, float, float] | None = None
) -> Path | None:
    """Reward mean per step as a PNG, its trailing mean over a tenth of the run (runs of 20 steps or
    more), and the held-out accuracy before (step 0) and after (last step) training when given as
    ``(mode, before, after)``; None when no step logged a reward."""
    points = [(r["step"], r["reward"]) for r in records if r.get("reward") is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, means = zip(*points)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    ax.plot(steps, means, marker="o", markersize=3, linewidth=0.8, alpha=0.45, label="reward (mean over the batch)")
    window = len(steps) // 10
    if window >= 2:
        ax.plot(
            steps,
            trailing_mean(means, window),
            linewidth=2.2,
            color="tab:blue",
            label=f"reward, mean of the last {window} steps",
        )
    if held_out is not None:
        mode, before, after = held_out
        ax.plot(
            [0, steps[-1]],
            [before, after],
            marker="s",
            linestyle="--",
            color="tab:red",
            label=f"held-out accuracy ({mode}), before and after",
        )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def summarize(records: list[dict[str, Any]], outputs: dict[str, Path | None], steps: int, window: int = 3) -> str:
    """The closing text: the optimizer steps taken, the reward over the first and last logged steps
    (every ``logging_steps``), and where the outputs are."""
    rewards = [r["reward"] for r in records if r.get("reward") is not None]
    lines = [f"finished {steps} optimizer steps"]
    if rewards:
        n = min(window, len(rewards))
        first, last = sum(rewards[:n]) / n, sum(rewards[-n:]) / n
        lines.append(f"reward: first {n} steps {first:.3f}, last {n} steps {last:.3f} ({last - first:+.3f})")
    times = [r["step_time_s"] for r in records if r.get("step_time_s") is not None]
    if times:
        lines.append(f"time per step: {sum(times) / len(times):.1f} s mean")
    lines += reward_delta_lines(rewards)
    lines += [f"{name}: {path}" for name, path in outputs.items() if path is not None]
    return "\n".join(lines)


DELTA_LOGS = 5


def reward_delta(rewards: list[float]) -> dict[str, float] | None:
    """The upstream walkthrough's before/after figure: the mean of the first five logged rewards
    against the last five, in points (None with fewer than five logs)."""
    if len(rewards) < DELTA_LOGS:
        return None
    initial = sum(rewards[:DELTA_LOGS]) / DELTA_LOGS
    final = sum(rewards[-DELTA_LOGS:]) / DELTA_LOGS
    return {"initial": initial, "final": final, "points": 100 * (final - initial)}


def reward_delta_lines(rewards: list[float]) -> list[str]:
    """``reward_delta`` as the walkthrough prints it, with its guard for a run too short to say."""
    delta = reward_delta(rewards)
    if delta is None:
        return [f"Only {len(rewards)} reward entries logged: train for a few more logging_steps for the reward delta"]
    return [
        f"Initial reward (first {DELTA_LOGS} logs avg): {delta['initial']:.2%}",
        f"Final reward   (last {DELTA_LOGS} logs avg):  {delta['final']:.2%}",
        f"Delta:                             {delta['points']:+.2f} pp",
    ]
