"""opencode-env's rooms keep their walls: internals never import the front ends, the sandbox and
the proxy stand alone, no import cycles, and the service README's table matches the tree."""

import re
from pathlib import Path

import pytest

from . import import_graph

SERVICE = Path(__file__).resolve().parents[2] / "services" / "opencode_env"
PACKAGE = SERVICE / "server" / "opencode_env_server"
ROOMS = ("api", "proxy", "rollouts", "sandbox")


def room_imports(room: str) -> set[str]:
    """The other rooms that ``room``'s modules import."""
    reached = set()
    for path in (PACKAGE / room).glob("*.py"):
        for name in import_graph.imported_modules(path, PACKAGE):
            parts = name.split(".")
            if parts[0] == "opencode_env_server" and len(parts) > 1 and parts[1] in ROOMS and parts[1] != room:
                reached.add(parts[1])
    return reached


@pytest.mark.parametrize(
    ("room", "allowed"),
    [("proxy", set()), ("sandbox", set()), ("rollouts", {"sandbox"}), ("api", {"proxy", "rollouts", "sandbox"})],
)
def test_each_room_imports_only_the_rooms_below_it(room: str, allowed: set[str]) -> None:
    assert room_imports(room) <= allowed


def test_no_import_cycles() -> None:
    assert import_graph.cycles(import_graph.graph(PACKAGE)) == []


def test_the_readme_table_lists_every_module() -> None:
    readme = (SERVICE / "README.md").read_text()
    table = readme.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_/]+\.py)` \|", table, flags=re.M))
    modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    assert listed == modules
