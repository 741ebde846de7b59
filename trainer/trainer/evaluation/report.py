"""An evaluation's report: the table printed, ``eval.json``, the trackio metrics, and the change from
before to after training."""

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .statistics import before_after_line, paired_difference


def table(reports: list[dict[str, Any]]) -> str:
    """One row per (report, mode): accuracy and mean score with their 95% intervals."""
    lines = [
        f"{'model':<14}{'mode':<9}{'questions':>10}{'accuracy':>10}{'95% CI':>16}{'mean score':>12}{'answered':>10}"
    ]
    for report in reports:
        for mode, result in report["modes"].items():
            s = result["summary"]
            ci = f"{100 * s['accuracy_ci'][0]:.1f}..{100 * s['accuracy_ci'][1]:.1f}"
            lines.append(
                f"{report['label']:<14}{mode:<9}{s['questions']:>10}{100 * s['accuracy']:>9.1f}%{ci:>16}"
                f"{s['mean_score']:>12.3f}{s['answered']:>10}"
            )
    return "\n".join(lines)


def write_report(path: Path, reports: list[dict[str, Any]]) -> None:
    """``eval.json``, written whole (a failed evaluation leaves none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps({"evaluations": reports}, indent=1, default=str))
    os.replace(partial, path)


def log_held_out(project: str, run_name: str, points: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """The held-out accuracy of each ``(step, report)`` as trackio metrics of run ``run_name``
    (``train/held_out_accuracy_<mode>``: beside the training reward on the dashboard)."""
    import trackio

    trackio.init(project=project, name=run_name, resume="allow")
    try:
        for step, report in points:
            trackio.log(
                {
                    f"train/held_out_accuracy_{mode}": result["summary"]["accuracy"]
                    for mode, result in report["modes"].items()
                },
                step=step,
            )
    finally:
        trackio.finish()


def before_and_after(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The change from ``before`` to ``after`` per mode: ``{"lines": [...], "modes": {mode: {...}}}``."""
    result: dict[str, Any] = {"lines": [], "modes": {}}
    for mode in before["modes"]:
        b, a = before["modes"][mode], after["modes"][mode]
        diff = paired_difference(b["records"], a["records"])
        result["modes"][mode] = {"before": b["summary"]["accuracy"], "after": a["summary"]["accuracy"], **diff}
        result["lines"].append(
            before_after_line(mode, b["summary"]["questions"], b["summary"]["accuracy"], a["summary"]["accuracy"], diff)
        )
    return result
