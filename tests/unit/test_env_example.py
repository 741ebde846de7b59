"""`.env.example` against its sources: every Compose default and every service setting it documents
has one value, so a default changed in one place and not the other fails here."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from opencode_env_server.settings import Settings as OpenCodeSettings
from reasoning_gym_env_server import Settings as ReasoningGymSettings
from trainer.gpu.preflight import STACK_DEFAULTS as GPU_PREFLIGHT_DEFAULTS

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


def opencode_env_defaults() -> list[tuple[str, str]]:
    """(service variable, Compose default) of the opencode-env service's user-settable variables."""
    environment = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["opencode-env"]["environment"]
    found = []
    for variable, value in environment.items():
        match = SUBSTITUTION.fullmatch(str(value))
        # INFERENCE_MODEL: the stack names the model it serves; the service's own default asks the server.
        if match and match.group(2) and variable != "INFERENCE_MODEL":
            found.append((variable, match.group(2)))
    return found


@pytest.mark.parametrize(("variable", "default"), opencode_env_defaults())
def test_opencode_env_settings_defaults_match_the_compose_ones(
    variable: str, default: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, _ in opencode_env_defaults():
        monkeypatch.delenv(name, raising=False)
    service_default = OpenCodeSettings.from_env()
    monkeypatch.setenv(variable, default)
    assert OpenCodeSettings.from_env() == service_default, f"compose.yaml sets {variable}={default}"


@pytest.mark.parametrize("variable", sorted(GPU_PREFLIGHT_DEFAULTS))
def test_the_gpu_preflight_assumes_the_stacks_defaults(variable: str) -> None:
    assert documented()[variable] == GPU_PREFLIGHT_DEFAULTS[variable]
