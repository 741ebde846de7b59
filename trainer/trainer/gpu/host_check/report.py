"""The host check's JSON report: one verdict per stage, their figures, and the check's verdict."""

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1
Verdict = Literal["PASS", "FAIL", "SKIPPED"]


@dataclass
class StageReport:
    """One stage: its verdict (``reason`` says why it failed or was skipped), how long it took against
    its timeout, where its log is, and what it measured."""

    name: str
    verdict: Verdict = "SKIPPED"
    reason: str | None = None
    seconds: float | None = None
    timeout_s: float | None = None
    log: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)

    def passed(self, **figures: Any) -> None:
        self.verdict, self.reason = "PASS", None
        self.figures.update(figures)

    def failed(self, reason: str, **figures: Any) -> None:
        self.verdict, self.reason = "FAIL", reason
        self.figures.update(figures)


@dataclass
class HostCheckReport:
    """``report.json``: PASS when every stage passed; else FAIL with the first failed stage's reason."""

    settings: dict[str, Any]
    stages: list[StageReport]
    started: str
    schema_version: int = SCHEMA_VERSION
    seconds: float | None = None

    @property
    def verdict(self) -> Verdict:
        return "PASS" if all(stage.verdict == "PASS" for stage in self.stages) else "FAIL"

    @property
    def reason(self) -> str | None:
        for stage in self.stages:
            if stage.verdict != "PASS":
                return f"{stage.name}: {stage.reason or stage.verdict.lower()}"
        return None

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        return {"schema_version": body.pop("schema_version"), "verdict": self.verdict, "reason": self.reason, **body}

    def write(self, path: Path) -> None:
        """Written whole (a reader never sees half a report)."""
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n")
        os.replace(partial, path)

    def lines(self) -> list[str]:
        """One line per stage, then the verdict."""
        out = []
        for stage in self.stages:
            took = f" ({stage.seconds:.0f} s of {stage.timeout_s:.0f})" if stage.seconds is not None else ""
            out.append(f"{stage.verdict:<8}{stage.name}{took}" + (f": {stage.reason}" if stage.reason else ""))
        out.append(f"verdict: {self.verdict}" + (f" ({self.reason})" if self.reason else ""))
        return out
