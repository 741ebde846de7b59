"""Job configuration: a YAML file, then environment variables, then ``--set`` overrides, parsed once
into a ``TrainerConfig``.

Keys are dotted paths into the YAML (``grpo.learning_rate``). Environment variables name them with
the ``TRAINER_`` prefix and ``__`` between levels (``TRAINER_GRPO__LEARNING_RATE=1e-5``); values are
parsed as YAML, so numbers, booleans and lists keep their types. The file and then each override is
validated against the schema, so a typo, a wrong type or another job's section fails at start-up,
naming the key and where it came from, instead of being ignored (a ``TRAINER_*`` variable of
another job's section is skipped with a warning: the environment is shared by the stack's jobs).
"""

import logging
import os
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pydantic
import yaml

from .errors import ConfigError
from .messages import first_message
from .schema import TrainerConfig, job_of_section

ENV_PREFIX = "TRAINER_"
# Compose variables of the GPU stack that share the prefix: they place the containers (.env reaches
# the trainer whole), they are not job settings.
STACK_VARIABLES = frozenset({"TRAINER_GPU", "TRAINER_IP"})

log = logging.getLogger(__name__)


def bundled_config(name: str) -> Path:
    """Path of a config shipped with the package (``grpo-cpu.yaml`` ...)."""
    return Path(str(resources.files("trainer") / "configs" / name))


def parse_value(text: str) -> Any:
    """A command-line or environment value, with YAML's types (``1e-5`` is a float, ``[a, b]`` a list)."""
    value = yaml.safe_load(text)
    if isinstance(value, str) and _looks_like_float(value):
        return float(value)  # YAML 1.1 reads 1e-5 (no dot) as a string
    return value


def _looks_like_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def set_path(config: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, creating levels as needed."""
    keys = dotted.split(".")
    node = config
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {dotted!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def env_overrides(environ: Mapping[str, str]) -> list[tuple[str, Any, str]]:
    """``TRAINER_GRPO__LEARNING_RATE=1e-5`` -> ``("grpo.learning_rate", 1e-5, "TRAINER_GRPO__LEARNING_RATE")``.

    An empty value is no override: Compose passes ``TRAINER_GRPO__MAX_STEPS=${GRPO_MAX_STEPS:-}``,
    which is empty unless the user set ``GRPO_MAX_STEPS``, so the job's YAML decides by default.
    """
    return [
        (name[len(ENV_PREFIX) :].lower().replace("__", "."), parse_value(value), name)
        for name, value in sorted(environ.items())
        if name.startswith(ENV_PREFIX) and name not in STACK_VARIABLES and value != ""
    ]


def _for_this_job(key: str, variable: str, job: str) -> bool:
    """Whether a ``TRAINER_*`` variable is for ``job``. The environment is shared by every job it
    runs (Compose's ``.env`` reaches the whole trainer container), so another job's variable is
    skipped, with a line saying so; in the file or ``--set``, another job's section is an error."""
    owner = job_of_section(key.split(".")[0])
    if owner is None or owner == job:
        return True
    log.warning("%s is for %s jobs; this %s job does not read it", variable, owner, job)
    return False


def cli_overrides(assignments: Sequence[str]) -> list[tuple[str, Any, str]]:
    """``["grpo.max_steps=3"]`` -> ``[("grpo.max_steps", 3, "--set grpo.max_steps=3")]``."""
    pairs = []
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        pairs.append((key.strip(), parse_value(value), f"--set {item}"))
    return pairs


def read_yaml(path: Path) -> Any:
    """The YAML at ``path`` (a bare shipped name like ``grpo-cpu.yaml`` works too)."""
    if not path.exists() and not path.is_absolute() and path.parent == Path(".") and bundled_config(path.name).exists():
        path = bundled_config(path.name)
    try:
        return yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found (shipped configs: trainer/trainer/configs/*.yaml)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None


def validate(raw: Any, source: str) -> TrainerConfig:
    """``raw`` as a ``TrainerConfig``; a ``ConfigError`` naming ``source`` and the key otherwise."""
    try:
        return TrainerConfig.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise ConfigError(f"{source}: {first_message(exc, TrainerConfig)}") from None


def load_config(
    path: Path,
    assignments: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    job: str | None = None,
) -> TrainerConfig:
    """The YAML at ``path`` with environment and command-line overrides applied (in that order).

    ``job`` is the command's job (``grpo``/``async-grpo``): the file's ``job`` must match it, and a
    file without one is taken as that job's. Without it (``eval``, ``pretrain``, ``config``) a file
    without ``job`` is a GRPO config.
    """
    raw = read_yaml(path)
    if isinstance(raw, dict) and job is not None:
        if raw.get("job", job) != job:
            raise ConfigError(f"{path} is a {raw['job']!r} config; run `python -m trainer {raw['job']}`")
        raw.setdefault("job", job)
    config = validate(raw, str(path))
    overrides = [
        (key, value, source)
        for key, value, source in env_overrides(os.environ if environ is None else environ)
        if _for_this_job(key, source, config.job)
    ]
    for key, value, source in overrides + cli_overrides(assignments):
        try:
            set_path(raw, key, value)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        config = validate(raw, source)
    return config
