"""The trainer's rooms keep their walls: no job imports another job, the CPU and GPU paths do not
import each other, the host pre-flight runs on any Python (standard library only), and nothing
below the command line imports a job."""

import sys
from pathlib import Path

import pytest

from . import import_graph

PACKAGE = Path(__file__).resolve().parents[2] / "trainer" / "trainer"


def imported_modules(path: Path) -> set[str]:
    return import_graph.imported_modules(path, PACKAGE)


def modules(folder: str) -> list[Path]:
    return sorted(p for p in (PACKAGE / folder).glob("*.py") if p.name != "__init__.py")


JOBS = [p.stem for p in modules("jobs")]


@pytest.mark.parametrize("job", JOBS)
def test_no_job_imports_another_job(job: str) -> None:
    imported = imported_modules(PACKAGE / "jobs" / f"{job}.py")
    others = {f"trainer.jobs.{other}" for other in JOBS if other != job}
    assert not imported & others


@pytest.mark.parametrize(
    ("room", "walled_off"),
    [
        ("cpu", "trainer.gpu"),
        ("gpu", "trainer.cpu"),
        ("envs", "trainer.jobs"),
        ("evaluation", "trainer.jobs"),
        ("training", "trainer.jobs"),
        ("config", "trainer.jobs"),
        ("ops", "trainer.jobs"),
        ("cpu", "trainer.jobs"),
        ("gpu", "trainer.jobs"),
    ],
)
def test_rooms_do_not_reach_into_each_other(room: str, walled_off: str) -> None:
    for path in modules(room):
        reached = {name for name in imported_modules(path) if name == walled_off or name.startswith(walled_off + ".")}
        assert not reached, f"{path.name} imports {sorted(reached)}"


def test_the_host_preflight_needs_only_the_standard_library() -> None:
    imported = {name.split(".")[0] for name in imported_modules(PACKAGE / "gpu" / "preflight.py")}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported - set(sys.stdlib_module_names)
