"""``python -m trainer.gpu.host_check``: run the stages and write ``report.json`` (exit 0 on PASS, 1
on FAIL). ``scripts/gpu-host-check.sh`` installs the wheel folder and runs this."""

import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime

from . import device, learning, walkthrough
from .installed import unmet_requirements
from .jobs import child_env
from .policy import PolicyMaker
from .processes import ChildFailed, StageTimeout, local_env_server
from .report import HostCheckReport, StageReport
from .settings import STAGES, CheckSettings, parse

ENV_SERVER_START_S = 60.0


def install(stage: StageReport, settings: CheckSettings) -> None:
    """What went into ``--site`` has every requirement met (the folder first, then the host's), and
    went in within the stage's timeout (the shell installs it and says how long it took)."""
    stage.seconds = settings.install_seconds
    if settings.site is None:
        stage.passed(site=None, note="no --site: the packages are this Python's own")
        return
    unmet = unmet_requirements(settings.site)
    if stage.seconds is not None and stage.seconds > stage.timeout_s:
        stage.failed(f"the wheels took {stage.seconds:.0f} s to install, over the stage's {stage.timeout_s:.0f} s")
    elif unmet:
        stage.failed(
            f"{len(unmet)} requirement(s) not met: " + "; ".join(unmet[:5]), unmet=unmet, site=str(settings.site)
        )
    else:
        stage.passed(site=str(settings.site))


def timed(stage: StageReport, work: Callable[[], None]) -> None:
    """Run one stage: its start line, its time, a failure as its verdict, its end line."""
    print(f"host-check: {stage.name} (timeout {stage.timeout_s:.0f} s, log {stage.log})", flush=True)
    began = time.monotonic()
    try:
        work()
    except (StageTimeout, ChildFailed, OSError, ValueError, KeyError) as error:
        stage.failed(
            f"{type(error).__name__}: {error}" if not isinstance(error, (StageTimeout, ChildFailed)) else str(error)
        )
    stage.seconds = round(time.monotonic() - began, 1)
    print(
        f"host-check: {stage.name} {stage.verdict} in {stage.seconds:.0f} s"
        + (f": {stage.reason}" if stage.reason else ""),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    settings.logs.mkdir(parents=True, exist_ok=True)
    stages = {
        name: StageReport(name, timeout_s=settings.timeouts[name], log=str(settings.logs / f"{name}.log"))
        for name in STAGES
    }
    report = HostCheckReport(
        settings={
            **asdict(settings),
            "work": str(settings.work),
            "site": str(settings.site) if settings.site else None,
        },
        stages=list(stages.values()),
        started=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    began = time.monotonic()
    install(stages["install"], settings)
    if stages["install"].verdict == "PASS":
        try:
            with local_env_server(
                settings.logs / "reasoning-gym-env.log", ENV_SERVER_START_S, child_env(settings)
            ) as url:
                maker = PolicyMaker(settings, url)
                maker.start()
                try:
                    timed(stages["device"], lambda: device.run(stages["device"], settings))
                    if stages["device"].verdict == "PASS":
                        timed(
                            stages["walkthrough"], lambda: walkthrough.run(stages["walkthrough"], settings, url, maker)
                        )
                        timed(stages["learning"], lambda: learning.run(stages["learning"], settings, url, maker))
                finally:
                    maker.stop()
        except (StageTimeout, ChildFailed) as error:
            stages["device"].failed(f"reasoning-gym-env: {error}")
    for stage in stages.values():
        if stage.verdict == "SKIPPED" and stage.reason is None:
            stage.reason = "an earlier stage failed"
    report.seconds = round(time.monotonic() - began + (settings.install_seconds or 0), 1)
    path = settings.work / "report.json"
    report.write(path)
    print("\n".join(f"host-check: {line}" for line in report.lines()), flush=True)
    print(f"host-check: report {path}", flush=True)
    return 0 if report.verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
