"""Job configuration: a YAML file, then environment variables, then ``--set`` overrides.

Keys are dotted paths into the YAML (``grpo.learning_rate``). Environment variables name them with
the ``TRAINER_`` prefix and ``__`` between levels (``TRAINER_GRPO__LEARNING_RATE=1e-5``); values are
parsed as YAML, so numbers, booleans and lists keep their types. Top-level keys must be known, so a
typo fails at start-up instead of being ignored; the ``grpo``/``async_grpo`` sections are passed to
TRL's config classes, which reject unknown fields themselves.
"""

import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import yaml

ENV_PREFIX = "TRAINER_"

# Top-level keys and what they mean; the job modules read them.
KNOWN_KEYS = {
    "job": "grpo or async-grpo (set by the configs; the CLI command must match)",
    "device": "async-grpo: auto (CUDA if present), cuda (train) or cpu (collect rows only)",
    "model": "policy weights: a local folder or a Hub id",
    "output_dir": "where metrics, checkpoints, the final model and the plot go",
    "run_name": "name of the run in trackio and the logs",
    "trackio_project": "trackio project (its SQLite store lives under output_dir/trackio unless TRACKIO_DIR is set)",
    "seed": "random seed of the data order and the environment datasets",
    "reasoning_gym": "GRPO: env_url, dataset, dataset_config, dataset_size, num_prompts, prompt",
    "opencode": "AsyncGRPO: env_url, tasks (file; default the shipped set), task_ids, difficulties, num_tasks, "
                "wait_timeout_s, limits",
    "inference": "url of the inference service, the model name it serves",
    "weight_sync": "mode (none|checkpoint|nccl), weights_dir, server_weights_dir, verify, tolerance",
    "collect": "async-grpo on CPU: timeout_s (how long to wait for training rows in all)",
    "eval": "held-out evaluation: seed (held-out, not the training seed), num_questions, pool, temperature, greedy, "
            "generate (local|inference), max_new_tokens, before_after (evaluate before and after training)",
    "pretrain": "GRPO on CPU: how `python -m trainer pretrain` makes the policy (trainer/pretrain.py: base, seed, "
                "questions, vocab_size, batch_size, learning_rate, skill_loss, max_steps, label_noise, noise_steps, ...)",
    "grpo": "fields of trl.GRPOConfig",
    "async_grpo": "fields of trl's AsyncGRPOConfig",
}


class ConfigError(ValueError):
    """The configuration is invalid; the message says which key and why."""


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
    if keys[0] not in KNOWN_KEYS:
        raise ConfigError(f"unknown setting {dotted!r}; top-level keys: {', '.join(sorted(KNOWN_KEYS))}")
    node = config
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {dotted!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def env_overrides(environ: Mapping[str, str]) -> list[tuple[str, Any]]:
    """``TRAINER_GRPO__LEARNING_RATE=1e-5`` -> ``("grpo.learning_rate", 1e-5)``."""
    return [(name[len(ENV_PREFIX):].lower().replace("__", "."), parse_value(value))
            for name, value in sorted(environ.items()) if name.startswith(ENV_PREFIX)]


def cli_overrides(assignments: Sequence[str]) -> list[tuple[str, Any]]:
    """``["grpo.max_steps=3"]`` -> ``[("grpo.max_steps", 3)]``."""
    pairs = []
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        pairs.append((key.strip(), parse_value(value)))
    return pairs


def load_config(path: Path, assignments: Sequence[str] = (), environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The YAML at ``path`` with environment and command-line overrides applied (in that order)."""
    if not path.exists() and not path.is_absolute() and bundled_config(path.name).exists() and path.parent == Path("."):
        path = bundled_config(path.name)
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found (shipped configs: trainer/configs/*.yaml)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    unknown = set(config) - set(KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}; known: {', '.join(sorted(KNOWN_KEYS))}")
    for key, value in env_overrides(os.environ if environ is None else environ) + cli_overrides(assignments):
        set_path(config, key, value)
    return config


def section(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A sub-mapping of the config (empty when absent)."""
    value = config.get(name) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name!r} must be a mapping, got {type(value).__name__}")
    return dict(value)
