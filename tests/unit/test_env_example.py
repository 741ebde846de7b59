"""`.env.example` against its sources: every Compose default and every service setting it documents
has one value, so a default changed in one place and not the other fails here."""

import dataclasses
import re
from pathlib import Path

import pytest
from reasoning_gym_env_server import Settings as ReasoningGymSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = ["compose.yaml", "compose.gpu.yaml", "compose.gpu-one.yaml", "compose.swarm.yaml"]
# ${NAME:-default} in a Compose file.
SUBSTITUTION = re.compile(r"\$\{([A-Z0-9_]+):-([^}]*)\}")
# NAME=value, set or commented out (a documented default the user may uncomment).
ASSIGNMENT = re.compile(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$")
# Compose variables that are not user settings (the image tag is set by the build scripts and tests).
NOT_SETTINGS = {"RLSTACK_TAG"}


def documented() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        match = ASSIGNMENT.match(line)
        if match:
            values.setdefault(match.group(1), match.group(2))
    return values


def compose_defaults() -> list[tuple[str, str, str]]:
    found = []
    for name in COMPOSE_FILES:
        for variable, default in SUBSTITUTION.findall((ROOT / name).read_text()):
            if default and variable not in NOT_SETTINGS:
                found.append((name, variable, default))
    return found


@pytest.mark.parametrize(("file", "variable", "default"), compose_defaults())
def test_every_compose_default_is_documented_with_the_same_value(file: str, variable: str, default: str) -> None:
    values = documented()
    assert variable in values, f"{file}: ${{{variable}}} is missing from .env.example"
    assert values[variable] == default, (
        f"{file} defaults {variable} to {default!r}, .env.example says {values[variable]!r}"
    )


@pytest.mark.parametrize(
    "field", [f.name for f in dataclasses.fields(ReasoningGymSettings) if f.name not in ("host", "port")]
)
def test_reasoning_gym_settings_defaults_match_the_documented_ones(field: str) -> None:
    default = getattr(ReasoningGymSettings(), field)
    documented_value = documented()[field.upper()]
    assert type(default)(documented_value) == default, (field, documented_value, default)
