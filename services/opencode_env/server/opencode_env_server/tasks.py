"""What a rollout is asked to do: the task, its held-out verification and its limits."""

from pathlib import PurePosixPath
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Limits(BaseModel):
    """Per-rollout resource bounds."""

    model_config = ConfigDict(extra="forbid")
    wall_s: float = Field(300.0, gt=0, le=3600, description="wall-clock limit of the agent run")
    cpu_s: int = Field(300, gt=0, le=3600, description="CPU seconds per process (RLIMIT_CPU)")
    memory_mb: int = Field(2048, ge=64, le=65536, description="resident memory of all the rollout's processes")
    max_processes: int = Field(256, ge=8, le=4096, description="processes and threads of the rollout's uid")
    disk_mb: int = Field(256, ge=1, le=65536, description="size of the work dir; also the largest single file")
    max_turns: int = Field(16, ge=1, le=1000, description="model calls through the proxy")
    max_completion_tokens: int = Field(8192, ge=1, le=1_000_000, description="completion tokens over all turns")
    max_tokens_per_turn: int = Field(1024, ge=1, le=131072, description="cap on each call's max_tokens")


class TestCase(BaseModel):
    """One held-out stdin/stdout test: the program's stdout must equal ``expected_stdout`` (trimmed)."""

    model_config = ConfigDict(extra="forbid")
    stdin: str = ""
    expected_stdout: str


class Task(BaseModel):
    """One coding task. ``tests`` and ``verify_commands`` are never shown to the agent."""

    model_config = ConfigDict(extra="forbid")
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
            path = PurePosixPath(name)
            if not name or path.is_absolute() or ".." in path.parts:
                raise ValueError(f"file path {name!r} must be relative and stay inside the work dir")
        return files


class RolloutRequest(BaseModel):
    """``POST /rollouts``: a task, and how the agent's model calls are served."""

    model_config = ConfigDict(extra="forbid")
    task: Task
    agent: Literal["opencode", "external"] = Field(
        "opencode", description="'external': no agent is started; an agent elsewhere calls the proxy with the key"
    )
    upstream_url: Optional[str] = Field(None, description="OpenAI-compatible base URL; default: the stack's inference")
    model: Optional[str] = Field(None, description="upstream model name; default: the inference server's")
    sampling: dict[str, Any] = Field(default_factory=dict, description="sampling fields forced on every call")
