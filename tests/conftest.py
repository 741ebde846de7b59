"""Marks every test by its folder: tests/unit -> unit, tests/container -> container."""

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if folder in ("unit", "container"):
            item.add_marker(getattr(pytest.mark, folder))
