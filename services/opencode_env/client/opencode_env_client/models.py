"""Wire contract of the OpenCode environment, imported by its server, its client, the trainer and the tests.

Two families:

- the rollouts API (``POST /rollouts`` and friends): ``Task`` and its ``Limits``, ``RolloutRequest``,
  ``CreatedRollout``, ``RolloutSummary``, ``Verification`` and the recorded ``Turn``;
- upstream OpenEnv's ``opencode_env`` tool over ``/mcp`` and ``/ws``: ``RunRolloutArguments`` in,
  ``RolloutResult`` out, with the fields of upstream's ``envs/opencode_env/models.py`` (its replies
  tolerate fields a newer server adds; tests validate ours with upstream's own models).

Pure pydantic and dataclasses: the server imports this module without the client's dependencies.
"""

import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# --- rollout statuses -----------------------------------------------------------------------
PENDING, RUNNING = "pending", "running"
COMPLETED, STOPPED, TIMED_OUT, LIMIT_EXCEEDED, INFRA_FAILURE, SETUP_FAILED = (
    "completed",
    "stopped",
    "timed_out",
    "limit_exceeded",
    "infra_failure",
    "setup_failed",
)
Status = Literal[
    "pending", "running", "completed", "stopped", "timed_out", "limit_exceeded", "infra_failure", "setup_failed"
]
FINAL = frozenset({COMPLETED, STOPPED, TIMED_OUT, LIMIT_EXCEEDED, INFRA_FAILURE, SETUP_FAILED})
UNSCORED = frozenset({INFRA_FAILURE, SETUP_FAILED})  # no reward: the policy did not get to act
MAX_TURNS, MAX_COMPLETION_TOKENS, MAX_TOKENS_PER_TURN = 1000, 1_000_000, 131072  # bounds of ``Limits``


def normalize_upstream(url: str) -> str:
    """A base URL without trailing slashes or ``/v1`` (upstream's ``base_url`` ends in ``/v1``): how
    the service and its clients compare upstreams."""
    url = url.strip().rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Reply(BaseModel):
    # Replies tolerate fields a newer server adds.
    model_config = ConfigDict(extra="ignore")


# --- the rollouts API -------------------------------------------------------------------------
class Limits(_Request):
    """Per-rollout resource bounds."""

    wall_s: float = Field(
        300.0, gt=0, le=3600, description="wall-clock limit of the agent run, and of the held-out checks together"
    )
    cpu_s: int = Field(300, gt=0, le=3600, description="CPU seconds per process (RLIMIT_CPU)")
    memory_mb: int = Field(
        2048, ge=64, le=65536, description="resident memory of all the rollout's processes (agent's, then checks')"
    )
    max_processes: int = Field(256, ge=8, le=4096, description="processes and threads of the rollout's uid")
    disk_mb: int = Field(
        256,
        ge=1,
        le=65536,
        description="size of the sandbox (work dir, HOME, TMPDIR), of the checks' copy of the work dir (apparent "
        "size) with what they write, and of the largest single file",
    )
    max_turns: int = Field(16, ge=1, le=MAX_TURNS, description="model calls through the proxy")
    max_completion_tokens: int = Field(
        8192, ge=1, le=MAX_COMPLETION_TOKENS, description="completion tokens over all turns"
    )
    max_tokens_per_turn: int = Field(1024, ge=1, le=MAX_TOKENS_PER_TURN, description="cap on each call's max_tokens")


class TestCase(_Request):
    """One held-out, output-compared test: the service feeds ``stdin`` to the task's ``test_command``
    and compares its stdout with ``expected_stdout`` itself; the expected output never enters a
    sandbox, so no code there can change the verdict (the check kind an agent cannot fool).

    ``compare``: ``trimmed`` (default; both sides stripped of surrounding whitespace), ``exact``,
    ``lines`` (trailing whitespace of each line and trailing empty lines ignored) or ``tokens``
    (equal as whitespace-separated words)."""

    __test__ = False  # not a pytest class
    stdin: str = ""
    expected_stdout: str
    compare: Literal["trimmed", "exact", "lines", "tokens"] = "trimmed"


MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255


def file_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a task file's path in the work dir (None if it can): it must be a
    normalised relative path ("a/b.py", not "./a", "a/", "a//b" or "."), stay inside the work dir,
    hold no NUL byte, and fit the file system's bounds."""
    if not name or "\x00" in name:
        return "must be a non-empty path without NUL bytes"
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return "must be relative and stay inside the work dir"
    if str(path) != name or name == ".":
        return "must be a normalised path to a file (no '.', no empty or trailing '/' parts)"
    if len(name.encode()) > MAX_PATH_BYTES or any(len(part.encode()) > MAX_NAME_BYTES for part in path.parts):
        return f"longer than the file system allows ({MAX_PATH_BYTES} bytes, {MAX_NAME_BYTES} per name)"
    return None


class Task(_Request):
    """One coding task. ``tests`` and ``verify_commands`` are never shown to the agent."""

    task_id: str = ""
    instruction: str = Field(min_length=1, max_length=200_000)
    files: dict[str, str] = Field(default_factory=dict, description="relative path -> text, placed in the work dir")
    setup: list[str] = Field(default_factory=list, description="shell commands run in the sandbox before the agent")
    tests: list[TestCase] = Field(default_factory=list)
    test_command: str = Field("python3 solution.py", description="program the tests feed stdin to")
    verify_commands: list[str] = Field(default_factory=list, description="shell commands; each passes on exit 0")
    test_timeout_s: float = Field(10.0, gt=0, le=600)
    limits: Limits = Field(default_factory=Limits)

    @field_validator("files")
    @classmethod
    def relative_paths(cls, files: dict[str, str]) -> dict[str, str]:
        for name in files:
            problem = file_name_problem(name)
            if problem:
                raise ValueError(f"file path {name!r}: {problem}")
        names = set(files)
        for name in files:  # a file cannot also be a directory of another
            parents = PurePosixPath(name).parents
            if clash := next((str(p) for p in parents if str(p) in names), None):
                raise ValueError(f"file path {name!r} needs {clash!r} to be a directory, but it is a file")
        return files


# The coding agents the service runs in a rollout's sandbox (services/opencode_env/README.md, "Agents").
CodingAgent = Literal["opencode", "claude-code", "codex", "mini-swe-agent", "qwen-code"]
AgentName = CodingAgent | Literal["external"]


class RolloutRequest(_Request):
    """``POST /rollouts``: a task, and how the agent's model calls are served."""

    task: Task
    agent: AgentName = Field(
        "opencode",
        description="the coding agent run in the sandbox; 'external': none is started, an agent elsewhere "
        "calls the proxy with the key",
    )
    upstream_url: str | None = Field(None, description="OpenAI-compatible base URL; default: the stack's inference")
    upstream_api_key: str | None = Field(
        None, description="bearer token sent to upstream_url; kept in the service, never in a sandbox, trace or log"
    )
    model: str | None = Field(None, description="upstream model name; default: the inference server's")
    sampling: dict[str, Any] = Field(default_factory=dict, description="sampling fields forced on every call")
    record_turns: bool = Field(
        True,
        description="False: relay calls as they are (no logprobs or token ids forced, "
        "no turns recorded); the turn and token limits still hold",
    )
    top_logprobs: int | None = Field(None, ge=0, le=20, description="top-k logprobs asked of the engine per token")
    sandbox_home: str | None = Field(
        None,
        pattern=r"^/[^\x00]*[^/\x00]$",
        description="absolute path that the sandbox operations (``/rollouts/{id}/sandbox/...``) map to the sandbox: "
        "HOME/workdir to its work dir, HOME to its home (upstream's harness uses /home/user); None: no mapping",
    )


class CreatedRollout(_Reply):
    """Answer to ``POST /rollouts``: the rollout's id, and the key and URL its model calls use."""

    rollout_id: str
    task_id: str = ""
    api_key: str
    status: Status
    proxy_base_url: str
    model: str
    sandbox_proxy_base_url: str = ""  # the same proxy as the sandbox reaches it (its seat's loopback port)


# --- sandbox operations (``/rollouts/{id}/sandbox/...``): what a harness's SandboxBackend needs ------
SandboxContext = Literal["agent", "verification"]


class SandboxCommand(_Request):
    """``POST .../sandbox/exec`` and ``POST .../sandbox/jobs``: a bash command in the rollout's sandbox.

    While the rollout runs it runs as the agent's uid; once the rollout is final, in the trusted
    verification context (the seat's verifier uid, a copy of the work dir, no agent process left).
    """

    command: str = Field(min_length=1, max_length=1_000_000)
    env: dict[str, str] = Field(default_factory=dict, description="added to the sandbox's clean environment")
    cwd: str | None = Field(None, description="working directory (default: the work dir); sandbox_home is mapped")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="exec only: killed after this long")
    stdin: str = Field("", max_length=16 << 20, description="exec only: fed to the command")
    setup: bool = Field(
        False,
        description="exec only: a setup command (before the rollout's first background job): with the "
        "operator's SETUP_NETWORK_ALLOW it reaches those hosts while it runs, and every process of the "
        "sandbox's uid is killed when it ends",
    )


class SandboxCommandResult(_Reply):
    """What a sandbox command did, and where it ran."""

    exit_code: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    timed_out: bool = False
    context: SandboxContext


class SandboxPath(_Request):
    """``POST .../sandbox/read`` and ``.../sandbox/exists``: a path in the sandbox (sandbox_home is mapped)."""

    path: str = Field(min_length=1, max_length=4096)


class SandboxWrite(SandboxPath):
    """``POST .../sandbox/write``: a text file (parent directories made), written as the context's uid."""

    content: str = Field(max_length=16 << 20)


class SandboxFile(_Reply):
    """Answer to read and exists."""

    path: str
    exists: bool
    content: str | None = None
    context: SandboxContext


class SandboxJob(_Reply):
    """A background command in the agent's sandbox: ``POST .../sandbox/jobs``, ``.../jobs/{job_id}/wait``."""

    job_id: str
    pid: int
    running: bool
    exit_code: int | None = None


class CommandOutcome(_Reply):
    """A command run in the sandbox (a setup command)."""

    command: str
    exit_code: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False


class CheckResult(_Reply):
    """One held-out check: a stdin/stdout test (``kind="test"``) or a verify command."""

    kind: Literal["test", "command"]
    passed: bool
    exit_code: int | None
    timed_out: bool
    stdout: str
    stderr: str
    index: int | None = None  # tests: position in ``Task.tests``
    command: str | None = None  # verify commands
    duration_s: float = 0.0
    limit: str | None = None  # the rollout limit this check passed and was stopped at (it failed)


# How a verification ended: every check ran ("scored"); one passed a limit of the rollout and was
# stopped, failing it and every check after it ("limit_exceeded": a reward below 1 that says so);
# no reward ("unscored": the rollout cannot be judged, ``reason`` says why).
VerificationStatus = Literal["scored", "limit_exceeded", "unscored"]


class Verification(_Reply):
    """``POST /rollouts/{id}/verify``: reward = fraction of checks passed; None when not scorable.
    The same answer for every call: a rollout is verified once."""

    reward: float | None
    passed: int
    total: int
    results: list[CheckResult]
    reason: str | None = None  # why there is no reward, or which limit stopped the checks
    status: VerificationStatus = "scored"


class RolloutSummary(_Reply):
    """A rollout's status as the API reports it (no secrets)."""

    rollout_id: str
    task_id: str = ""
    status: Status
    final: bool
    detail: str | None = None
    agent: AgentName = "opencode"
    model: str = ""
    upstream_url: str = ""
    turns: int = 0
    completion_tokens: int = 0
    agent_exit_code: int | None = None
    agent_prestarted: bool = False
    created_at: float
    first_call_at: float | None = None
    finished_at: float | None = None
    reward: float | None = None
    infra_failure: bool = False
    setup_results: list[CommandOutcome] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)


class Health(_Reply):
    """``GET /health``."""

    status: str
    active_rollouts: int
    max_rollouts: int
    seats: int
    warm_agents: int
    sessions: int
    max_sessions: int
    inference_url: str
    network_isolation: bool
    replica: str = ""  # the answering container's host name (replicas of one service share a DNS name)
    rollouts_total: int = 0  # rollouts this replica has started since it started

    @property
    def free_rollouts(self) -> int:
        """Rollouts this replica can start now."""
        return max(0, self.max_rollouts - self.active_rollouts)


@dataclass
class Turn:
    """One model call through the proxy, with what the engine saw and sampled (``GET .../turns``)."""

    turn: int
    request: dict[str, Any]
    response: dict[str, Any]
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    per_token_logps: list[float]
    finish_reason: str | None
    latency_s: float
    weight_version: str | None
    stream: bool
    # False for calls without tools (title, summary, compaction) and for replies cut at a stop string.
    trainable: bool
    prefix_consistent: bool | None = None  # None on the first turn
    upstream_status: int = 200
    upstream_error: str | None = None
    timestamp: float = field(default_factory=time.time)
    completion_tokens: list[str] = field(default_factory=list)  # the sampled tokens' text, one per id
    # The stop string the engine cut the reply's text at: its completion ids run past the text the
    # agent received (the next prompt does not extend them), so the turn is not trainable.
    stopped_at: str | None = None

    @property
    def ok(self) -> bool:
        """The engine answered and returned token ids for prompt and completion."""
        return self.upstream_status < 400 and bool(self.prompt_token_ids) and self.upstream_error is None


# --- upstream OpenEnv's opencode_env tool -----------------------------------------------------
Endpoint = Literal["", "vllm", "openai", "hf_router"]


class RunRolloutArguments(_Request):
    """Arguments of the ``run_rollout`` tool, as upstream's ``OpenCodeEnv.run_rollout`` sends them."""

    endpoint: Endpoint = Field(
        "",
        description="'vllm': the stack's inference service; 'openai' / 'hf_router': "
        "that provider (base URL, key and model from the arguments or the server's settings)",
    )
    base_url: str = Field("", description="OpenAI-compatible base URL ending in /v1; empty: the stack's inference")
    api_key: str = Field(
        "",
        description="bearer token for an external base_url; sent upstream by the service, "
        "never written into the sandbox, a trace or a log",
    )
    model: str = Field("", description="model id at the endpoint; empty: its default")
    instruction: str = Field(min_length=1, max_length=200_000, description="the prompt given to opencode")
    setup: list[str] | None = Field(None, description="bash commands run in the sandbox before the agent")
    verify: list[str] | None = Field(None, description="bash commands run after the agent; reward = passed/total")
    task_id: str = Field("", description="echoed back in the result")
    mode: Literal["transparent_proxy", "black_box"] = Field(
        "transparent_proxy", description="'black_box': relay the model calls without recording turns"
    )
    disable_thinking: bool | None = Field(
        None, description="send chat_template_kwargs.enable_thinking=false; default: on for 'vllm', off otherwise"
    )
    max_tokens_cap: int = Field(4096, description="clamp on each call's max_tokens; <= 0: no clamp")
    top_logprobs: int = Field(5, ge=0, le=20, description="top-k logprobs asked of the engine")
    agent_timeout_s: float = Field(600.0, gt=0, le=3600, description="wall-clock budget of the agent run")
    template: str = Field("", description="upstream's E2B template name; ignored: one local sandbox image")


class RolloutTurn(_Reply):
    """One intercepted LLM turn (upstream's ``RolloutTurn``)."""

    turn: int
    finish_reason: str | None = None
    completion_tokens: list[str] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    per_token_logps: list[float] = Field(default_factory=list)
    latency_s: float = 0.0
    timestamp: float = 0.0
    upstream_status: int | None = None
    upstream_error: dict[str, Any] | None = None


class CommandResult(_Reply):
    """One setup or verify command (upstream's ``CommandResult``: its exit code is always a number;
    ``TIMED_OUT_EXIT`` for a command killed at its timeout)."""

    cmd: str
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0


# The exit code upstream's ``CommandResult`` gets for a command killed at its timeout (``timeout(1)``'s).
TIMED_OUT_EXIT = 124


class RolloutResult(_Reply):
    """What ``run_rollout`` returns, as JSON text (upstream's ``RolloutResult``)."""

    task_id: str = ""
    sandbox_id: str = ""
    reward: float | None = None
    agent_exit_code: int | None = None
    wall_s: float = 0.0
    mode: str = "black_box"
    setup_results: list[CommandResult] = Field(default_factory=list)
    verify_results: list[CommandResult] = Field(default_factory=list)
    proxy_turns: list[RolloutTurn] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)
    files_extra: list[str] = Field(default_factory=list)
    agent_log_tail: str = ""
    proxy_log_tail: str = ""
    error: str | None = None


class OpenCodeState(_Reply):
    """State of one OpenEnv session (upstream's ``OpenCodeState``)."""

    episode_id: str | None = None
    step_count: int = 0
    rollouts_completed: int = 0
    last_reward: float | None = None
    last_task_id: str | None = None
    last_sandbox_id: str | None = None
