"""The hooks named by dotted path in an async-grpo config (``opencode.rollout_reward_fn``,
``train_turn_fn``, ``agent_turn_fn``, ``verifier``): a bad path stops the config, a good one reaches
TRL's loop arguments or the session factory; the shipped example reward; the worked example of the
OpenCode README."""

import importlib.util
import pickle
import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from trainer.__main__ import main
from trainer.config import ConfigError, bundled_config, load_config
from trainer.config import hooks as hooks_module
from trainer.envs.coding_tasks import load_tasks
from trainer.examples.rewards import binary_with_penalties

ROOT = Path(__file__).resolve().parents[2]
USER_MODULE = "rlstack_test_user_hooks"
USER_HOOKS = """
def reward(outcome):
    return 1.0

def keep_turn(turn, /, strict=False):
    return True

def two_args(outcome, extra):
    return 0.0

def no_args():
    return 0.0

def keyword_only(*, outcome):
    return 0.0

NOT_CALLABLE = 3
lambda_hook = lambda outcome: 0.0  # noqa: E731
"""


@pytest.fixture
def user_hooks(tmp_path, monkeypatch):
    """A user's hook module on the import path (and a module that fails to import)."""
    (tmp_path / f"{USER_MODULE}.py").write_text(USER_HOOKS)
    (tmp_path / f"{USER_MODULE}_broken.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield USER_MODULE
    for name in (USER_MODULE, f"{USER_MODULE}_broken"):
        sys.modules.pop(name, None)


def async_grpo_config(tmp_path: Path, opencode: str = "") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"job: async-grpo\nmodel: m\nopencode:\n  task_ids: [c01-reverse-line]\n{opencode}")
    return path


@pytest.mark.parametrize(
    "path, problem",
    [
        ("no_such_module_xyz:reward", "cannot import module 'no_such_module_xyz': ModuleNotFoundError"),
        (f"{USER_MODULE}_broken:reward", "cannot import module '{m}_broken': RuntimeError: boom at import"),
        ("{m}:missing", "module '{m}' has no attribute 'missing'"),
        ("{m}:NOT_CALLABLE", "'NOT_CALLABLE' is a int, not a function"),
        ("{m}:two_args", "it is called with one positional argument (a HarnessRolloutOutcome), "),
        ("{m}:no_args", "its signature no_args() does not accept that"),
        ("{m}:keyword_only", "its signature keyword_only(*, outcome) does not accept that"),
        ("{m}:lambda_hook", "cannot be pickled"),
        ("not a path", "is not a dotted path to a function: write package.module:function"),
        ("{m}:1st", "is not a dotted path"),
    ],
)
def test_a_bad_hook_path_stops_the_config_with_the_key_and_the_path(tmp_path, user_hooks, path, problem):
    path, problem = path.format(m=user_hooks), problem.format(m=user_hooks)
    with pytest.raises(ConfigError) as caught:
        load_config(async_grpo_config(tmp_path), [f"opencode.rollout_reward_fn={path}"], environ={})
    message = str(caught.value)
    assert message.startswith(f"--set opencode.rollout_reward_fn={path}: `opencode.rollout_reward_fn`"), message
    assert problem in message


def test_a_bad_hook_in_the_file_stops_the_dry_run_before_any_service(tmp_path, user_hooks, capsys):
    config = async_grpo_config(tmp_path, f"  train_turn_fn: {user_hooks}:two_args\n")
    assert main(["async-grpo", "--config", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"configuration error: {config}: `opencode.train_turn_fn` = '{user_hooks}:two_args': " in err
    assert "(a HarnessTurn: messages, tools, content, tool_calls)" in err


def test_both_path_syntaxes_name_the_same_function(tmp_path, user_hooks):
    hooks = f"  rollout_reward_fn: {user_hooks}:reward\n  train_turn_fn: {user_hooks}.keep_turn\n"
    config = load_config(async_grpo_config(tmp_path, hooks), environ={})
    assert config.opencode.hook_paths() == {
        "rollout_reward_fn": f"{user_hooks}:reward",
        "train_turn_fn": f"{user_hooks}.keep_turn",
    }
    resolved = hooks_module.resolve_hooks(config.opencode.hook_paths())
    user = sys.modules[user_hooks]
    assert resolved == {"rollout_reward_fn": user.reward, "train_turn_fn": user.keep_turn}


class Loop116:
    """The keywords of TRL 1.16.0's ``_HarnessRolloutLoop``: of the hooks, rollout_reward_fn only."""

    def __init__(
        self,
        *,
        harness_session_factory,
        harness_adapter=None,
        rollout_reward_fn=None,
        lossless_capture=True,
        **loop_kwargs,
    ):
        pass


class LoopWithoutHooks:
    def __init__(self, *, harness_session_factory, **loop_kwargs):
        pass


def test_only_trls_own_hook_is_checked_against_the_installed_trls_loop(tmp_path, user_hooks, monkeypatch):
    config = async_grpo_config(tmp_path)
    monkeypatch.setattr(hooks_module, "trl_class", lambda spec: Loop116)
    assert load_config(config, [f"opencode.rollout_reward_fn={user_hooks}:reward"], environ={})
    # TRL 1.16 takes neither: our session factory applies them.
    assert load_config(config, [f"opencode.train_turn_fn={user_hooks}:keep_turn"], environ={})
    assert load_config(config, [f"opencode.agent_turn_fn={user_hooks}:keep_turn"], environ={})
    monkeypatch.setattr(hooks_module, "trl_class", lambda spec: LoopWithoutHooks)
    with pytest.raises(ConfigError) as caught:
        load_config(config, [f"opencode.rollout_reward_fn={user_hooks}:reward"], environ={})
    assert (
        "`opencode.rollout_reward_fn`: the installed TRL's harness rollout loop does not take `rollout_reward_fn` "
        "(it takes: none of the hooks); remove the key"
    ) in str(caught.value)


def test_a_verifier_takes_the_sandbox_and_the_task(tmp_path, user_hooks):
    config = async_grpo_config(tmp_path)
    assert load_config(config, [f"opencode.verifier={user_hooks}:two_args"], environ={}).opencode.verifier
    with pytest.raises(ConfigError, match=r"called with two positional arguments \(the rollout's sandbox"):
        load_config(config, [f"opencode.verifier={user_hooks}:reward"], environ={})


class FakeDataset:
    @staticmethod
    def from_list(rows: list) -> list:
        return rows


@pytest.fixture
def async_grpo_job(monkeypatch):
    """``trainer.jobs.async_grpo``, importable in the test venv: stand-ins for transformers and datasets
    where they are missing; the job's modules built on them are forgotten afterwards."""
    for name, module in (
        ("transformers", SimpleNamespace(TrainerCallback=object)),
        ("datasets", SimpleNamespace(Dataset=FakeDataset)),
    ):
        if importlib.util.find_spec(name) is None:
            monkeypatch.setitem(sys.modules, name, module)
    job_modules = ("trainer.jobs.async_grpo", "trainer.training.step_log")
    built_on_them = [name for name in job_modules if name not in sys.modules]
    yield importlib.import_module("trainer.jobs.async_grpo")
    for name in built_on_them:
        sys.modules.pop(name, None)


def trl_args() -> types.SimpleNamespace:
    """The ``AsyncGRPOConfig`` fields the loop arguments read."""
    return SimpleNamespace(
        num_generations=4,
        max_inflight_tasks=4,
        vllm_server_base_url="http://inference:8000",
        max_completion_length=64,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        request_timeout=120,
        chat_template_kwargs={},
        max_tool_calling_iterations=None,
        log_completions=False,
        num_completions_to_print=None,
        fork_threshold_tokens=1024,
    )


def test_the_hooks_reach_trls_loop_arguments_and_the_dry_run_plan(tmp_path, user_hooks, async_grpo_job):
    config = load_config(
        async_grpo_config(tmp_path),
        [
            "opencode.rollout_reward_fn=trainer.examples.rewards:binary_with_penalties",
            f"opencode.agent_turn_fn={user_hooks}.keep_turn",
        ],
        environ={},
    )
    tokenizer = SimpleNamespace(convert_tokens_to_ids=lambda token: 7)
    kwargs = async_grpo_job.loop_arguments(
        config, trl_args(), async_grpo_job.selected_tasks(config), tmp_path, tokenizer
    )
    assert kwargs["rollout_reward_fn"] is binary_with_penalties
    # The turn hooks go to our session factory, not to TRL 1.16's loop (which takes no such keyword).
    assert "agent_turn_fn" not in kwargs and "train_turn_fn" not in kwargs
    factory = kwargs["harness_session_factory"].keywords
    assert factory["agent_turn_fn"] is sys.modules[user_hooks].keep_turn and "train_turn_fn" not in factory
    # TRL's CUDA worker pickles the loop arguments into a spawned process.
    assert pickle.loads(pickle.dumps(kwargs["rollout_reward_fn"])) is binary_with_penalties
    config = load_config(async_grpo_config(tmp_path), environ={})
    kwargs = async_grpo_job.loop_arguments(
        config, trl_args(), async_grpo_job.selected_tasks(config), tmp_path, tokenizer
    )
    assert not set(hooks_module.HOOKS) & (set(kwargs) | set(kwargs["harness_session_factory"].keywords))


def outcome(env_reward: float | None, timed_out: bool = False, tool_failure_count: int = 0) -> SimpleNamespace:
    """The fields of TRL's ``HarnessRolloutOutcome``."""
    return SimpleNamespace(
        env_reward=env_reward,
        completion=[],
        trace=[],
        tool_call_count=3,
        tool_failure_count=tool_failure_count,
        tool_calls_by_name={"bash": 3},
        timed_out=timed_out,
    )


@pytest.mark.parametrize(
    "case, reward",
    [
        (outcome(1.0), 1.0),  # every test passed
        (outcome(0.8), 0.0),  # most is nothing: binarized
        (outcome(0.0), 0.0),
        (outcome(1.0, timed_out=True), 0.5),
        (outcome(1.0, tool_failure_count=2), 0.8),
        (outcome(0.0, tool_failure_count=10), -0.3),  # the tool penalty is capped
        (outcome(1.0, timed_out=True, tool_failure_count=5), 0.2),
        (outcome(None, timed_out=True), None),  # unscored stays unscored
    ],
)
def test_the_example_reward_binarizes_and_penalises(case, reward):
    assert binary_with_penalties(case) == (reward if reward is None else pytest.approx(reward))


def readme_block(language: str, text: str) -> str:
    """The one fenced ``language`` block of the README's worked example."""
    (block,) = re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)
    return block


def test_the_opencode_readmes_worked_example_loads(tmp_path, monkeypatch):
    readme = (ROOT / "services" / "opencode_env" / "README.md").read_text()
    example = readme.split("### Worked example", 1)[1].split("\n## ", 1)[0]
    tasks = tmp_path / "my-tasks.jsonl"
    tasks.write_text(readme_block("jsonl", example))
    opencode = yaml.safe_load(readme_block("yaml", example))["opencode"]
    overrides = [f"opencode.{key}={value}" for key, value in opencode.items() if key != "tasks"]
    config = load_config(bundled_config("async-grpo-gpu.yaml"), [*overrides, f"opencode.tasks={tasks}"], environ={})
    assert config.opencode.hook_paths() == {"rollout_reward_fn": "trainer.examples.rewards:binary_with_penalties"}
    train, held_out = load_tasks(tasks), load_tasks(tasks, split="held_out")
    assert train and held_out
    assert any(t.files and t.tests for t in train) and any(t.setup and t.verify_commands for t in train)
    # The reward function it shows is the shipped one's code.
    source = (ROOT / "trainer" / "trainer" / "examples" / "rewards.py").read_text()
    for line in readme_block("python", example).splitlines():
        assert line.split("  # ")[0] in source, line
