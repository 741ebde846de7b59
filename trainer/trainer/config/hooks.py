"""The async-grpo config's hooks, named by dotted path and resolved to functions.

``opencode.rollout_reward_fn`` goes to TRL's harness rollout loop (TRL 1.16 takes it);
``opencode.train_turn_fn`` and ``opencode.agent_turn_fn`` (TRL's later hooks, which 1.16 does not
take) are applied by our session factory to each rollout's training trace
(``trainer.envs.turn_selection``), and ``opencode.verifier`` scores a rollout in the service's
trusted verification context instead of the tasks' held-out tests. Each names a module-level function
as ``package.module:function`` (``package.module.function`` works too). When the config is loaded
each one is imported and checked: it is callable with the positional arguments it is given, it can be
pickled (TRL's CUDA rollout worker runs in a spawned process), and, for a TRL hook, the installed
TRL's harness rollout loop takes it as a keyword (where TRL is installed; see ``trl_sections``). A
problem is a ``ConfigError`` naming the key and the path, so ``--dry-run`` and the job stop before any
service is contacted. The job resolves them again (imports are cached).

TRL's types are named here, never imported: this module needs the standard library only.
"""

import importlib
import inspect
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError
from .trl_sections import trl_class

HARNESS_LOOP = "trl.experimental.async_grpo.openenv_harness:_HarnessRolloutLoop"
# Each hook and what it is called with; TRL_HOOKS go to TRL's loop, the others to our session factory.
HOOKS = {
    "rollout_reward_fn": "one positional argument (a HarnessRolloutOutcome)",
    "train_turn_fn": "one positional argument (a HarnessTurn: messages, tools, content, tool_calls)",
    "agent_turn_fn": "one positional argument (the rollout's trace entries, a list of dicts)",
    "verifier": "two positional arguments (the rollout's sandbox, a RemoteSandbox, and its Task)",
}
TRL_HOOKS = ("rollout_reward_fn",)
ARGUMENTS = {key: 2 if key == "verifier" else 1 for key in HOOKS}

Hook = Callable[..., Any]


def split_path(key: str, path: str) -> tuple[str, str]:
    """``"pkg.mod:fn"`` or ``"pkg.mod.fn"`` -> ``("pkg.mod", "fn")``; a ``ConfigError`` for anything else."""
    module, sep, name = path.partition(":")
    if not sep:
        module, _, name = path.rpartition(".")
    if not (module and name.isidentifier() and all(part.isidentifier() for part in module.split("."))):
        raise ConfigError(
            f"`opencode.{key}`: {path!r} is not a dotted path to a function: write package.module:function"
        )
    return module, name


def resolve_hook(key: str, path: str) -> Hook:
    """The function ``path`` names, checked to be a usable ``key`` hook; a ``ConfigError`` naming
    ``key``, ``path`` and the problem otherwise."""
    module_name, name = split_path(key, path)
    where = f"`opencode.{key}` = {path!r}"
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - importing runs the user's module, which may raise anything
        raise ConfigError(f"{where}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from None
    try:
        hook = getattr(module, name)
    except AttributeError:
        raise ConfigError(f"{where}: module {module_name!r} has no attribute {name!r}") from None
    if not callable(hook):
        raise ConfigError(f"{where}: {name!r} is a {type(hook).__name__}, not a function")
    try:
        signature = inspect.signature(hook)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: its signature cannot be read; name a Python function") from None
    try:
        signature.bind(*[object()] * ARGUMENTS[key])
    except TypeError:
        raise ConfigError(
            f"{where}: it is called with {HOOKS[key]}, and its signature {name}{signature} does not accept that"
        ) from None
    try:
        pickle.dumps(hook)
    except Exception as exc:  # noqa: BLE001 - pickling reports its failures with several exception types
        raise ConfigError(
            f"{where}: cannot be pickled ({exc}); TRL's rollout worker runs in a spawned process: "
            "name a function defined with `def` at a module's top level"
        ) from None
    return hook


def check_loop_takes(key: str, loop: type | None) -> None:
    """A ``ConfigError`` when TRL's harness rollout loop class ``loop`` has no keyword ``key``
    (None: TRL is not installed, and no job can run here)."""
    if loop is None:
        return
    taken = inspect.signature(loop.__init__).parameters
    if key not in taken:
        hooks = ", ".join(hook for hook in HOOKS if hook in taken) or "none of the hooks"
        raise ConfigError(
            f"`opencode.{key}`: the installed TRL's harness rollout loop does not take `{key}` "
            f"(it takes: {hooks}); remove the key"
        )


def validate_hook(key: str, path: str) -> None:
    """Check at config load that ``path`` resolves to a ``key`` hook (for a TRL hook: one the installed TRL takes)."""
    resolve_hook(key, path)
    if key in TRL_HOOKS:
        check_loop_takes(key, trl_class(HARNESS_LOOP))


def resolve_hooks(paths: Mapping[str, str]) -> dict[str, Hook]:
    """Hook key -> function, for each hook in ``paths`` (key -> dotted path)."""
    return {key: resolve_hook(key, path) for key, path in paths.items()}
