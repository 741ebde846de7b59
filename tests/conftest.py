"""Marks every test by its folder: tests/unit -> unit, tests/container -> container. Puts upstream's
unchanged ``opencode_env`` harness (tests/upstream, see its README) on the import path."""

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parent / "upstream"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if folder in ("unit", "container"):
            item.add_marker(getattr(pytest.mark, folder))
