"""The statistics of a held-out evaluation: accuracy and mean score with 95% intervals, and the
paired change from before to after training."""

import math
from collections.abc import Sequence
from typing import Any

Z95 = 1.959963984540054


def proportion_ci(successes: int, n: int) -> tuple[float, float]:
    """Wilson score interval (95%) of a proportion."""
    if n == 0:
        return 0.0, 0.0
    p = successes / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): normal 95% interval of a mean."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, mean - Z95 * sd / math.sqrt(n), mean + Z95 * sd / math.sqrt(n)


def summary_of(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy (Wilson 95% CI) and mean score (normal 95% CI) of scored records."""
    correct = sum(r["correct"] for r in records)
    low, high = proportion_ci(correct, len(records))
    score, score_low, score_high = mean_ci([r["score"] for r in records])
    return {
        "questions": len(records),
        "accuracy": correct / len(records) if records else 0.0,
        "accuracy_ci": [low, high],
        "mean_score": score,
        "mean_score_ci": [score_low, score_high],
        "answered": sum(r["answer"] is not None for r in records),
    }


def paired_difference(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> dict[str, float]:
    """After minus before on the same questions: accuracy points and their 95% CI (paired)."""
    if [r["index"] for r in before] != [r["index"] for r in after]:
        raise ValueError("before and after were not evaluated on the same questions")
    mean, low, high = mean_ci([float(a["correct"]) - float(b["correct"]) for b, a in zip(before, after)])
    return {"points": 100 * mean, "ci_low": 100 * low, "ci_high": 100 * high}


def before_after_line(label: str, n: int, before: float, after: float, diff: dict[str, float]) -> str:
    """``held-out accuracy (T=1.0, 200 questions): 31.0% -> 58.5% (+27.5 pts, 95% CI +19.8..+35.1)``."""
    return (
        f"held-out accuracy ({label}, {n} questions): {100 * before:.1f}% -> {100 * after:.1f}% "
        f"({diff['points']:+.1f} pts, 95% CI {diff['ci_low']:+.1f}..{diff['ci_high']:+.1f})"
    )
