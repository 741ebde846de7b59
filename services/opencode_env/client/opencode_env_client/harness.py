"""OpenEnv harness sessions over the OpenCode environment's HTTP API (TRL 1.16's loop-owning mode).

``OpenCodeServiceSessionFactory`` is what TRL's ``HarnessRolloutWorker`` calls ``create(prompt, seed,
episode_id)`` on: it finds the task the prompt came from (held-out tests included), starts a
rollout with the trainer's sampling policy forced on every model call, and returns an
``OpenCodeServiceSession`` that TRL waits on, reads the engine-exact ``TrainingTrace`` from, verifies and
closes. The factory is picklable (TRL spawns its rollout worker); its HTTP client is made lazily in
the process that uses it.
"""

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from openenv.core.harness import ResourceSession, ResourceSessionFactory, ToolResult, TrainingTrace, VerifyResult

from .client import OpenCodeEnvClient
from .models import UNSCORED, CodingAgent, CreatedRollout, RolloutSummary, Task
from .remote_sandbox import RemoteSandbox
from .replicas import ReplicaPool

log = logging.getLogger("opencode_env_client.harness")
# verifier(sandbox, task) -> VerifyResult or a reward: called once the rollout is final, its sandbox
# operations in the trusted verification context (a copy of the work dir, the seat's verifier uid).
Verifier = Callable[[RemoteSandbox, Task], "VerifyResult | float | None"]


class RolloutNotScorable(RuntimeError):
    """The rollout failed for infrastructure reasons (upstream down, setup failed): no reward, not 0.

    Raised from ``verify``; TRL's harness loop then drops the rollout from its group's statistics.
    """


def task_instruction(task: Any) -> str:
    """The instruction text a TRL prompt (chat messages), a ``Task`` or a task dict carries."""
    if isinstance(task, Task):
        return task.instruction
    if isinstance(task, Mapping):
        return str(task.get("instruction", ""))
    if isinstance(task, Sequence) and not isinstance(task, str):
        users = [m for m in task if isinstance(m, Mapping) and m.get("role") == "user"]
        if users:
            content = users[-1].get("content")
            if isinstance(content, list):  # multimodal-style content parts
                return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
            return str(content)
    return str(task)


class OpenCodeServiceSession(ResourceSession):
    """One rollout on the service; the agent (OpenCode) owns its tool loop."""

    def __init__(
        self,
        client: OpenCodeEnvClient,
        created: CreatedRollout,
        wait_timeout_s: float,
        task: Task | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self.client = client
        self.created = created
        self.rollout_id = created.rollout_id
        self.task_id = created.task_id
        self.wait_timeout_s = wait_timeout_s
        self.task = task
        self.verifier = verifier
        self.summary: RolloutSummary | None = None  # once waited for
        self._closed = False

    # The loop-owning protocol (openenv.core.harness.TrainableSession).
    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Wait until the agent finished; raises ``TimeoutError`` if it is still running after the timeout."""
        self.summary = self.client.wait(self.rollout_id, timeout_s or self.wait_timeout_s)
        if not self.summary.final:
            raise TimeoutError(
                f"rollout {self.rollout_id} still {self.summary.status} after {timeout_s or self.wait_timeout_s:g}s"
            )
        return self.summary.agent_exit_code or 0

    def fetch_training_trace(self) -> TrainingTrace:
        """The engine's prompt/completion ids, logprobs and loss masks of every model call."""
        return TrainingTrace.model_validate(self.client.training_trace(self.rollout_id))

    # ResourceSession: the agent calls its tools inside the sandbox, not through the session.
    def initial_messages(self) -> list[dict[str, Any]]:
        """Not used in loop-owning mode: OpenCode builds its own prompt."""
        return []

    def list_tools(self) -> list[Any]:
        """Not used in loop-owning mode: OpenCode brings its own tools."""
        return []

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Not supported: OpenCode runs its tools itself."""
        return ToolResult(error=f"{name}: tools run inside the OpenCode sandbox, not through the session")

    def verify(self, transcript: list[Any], final_state: Any = None) -> VerifyResult:
        """Run the held-out tests on the service (reward = fraction passed), or the factory's
        ``verifier`` in the trusted verification context."""
        if self.verifier is not None:
            return self._run_verifier()
        verification = self.client.verify(self.rollout_id)
        if verification.reward is None:
            raise RolloutNotScorable(f"rollout {self.rollout_id}: {verification.reason or 'no reward'}")
        metrics = {
            "tests_passed": verification.passed,
            "tests_total": verification.total,
            "turns": self.summary.turns if self.summary else None,
            "status": self.summary.status if self.summary else None,
        }
        return VerifyResult(
            env_reward=verification.reward,
            done=True,
            metrics=metrics,
            artifacts={"rollout_id": self.rollout_id, "results": [r.model_dump() for r in verification.results]},
        )

    def _run_verifier(self) -> VerifyResult:
        summary = self.client.status(self.rollout_id)
        if not summary.final:
            raise RuntimeError(f"rollout {self.rollout_id} is still {summary.status}: wait for it before verify()")
        if summary.status in UNSCORED:
            raise RolloutNotScorable(f"rollout {self.rollout_id}: not scored: {summary.status} ({summary.detail})")
        # Final: every operation on the sandbox runs in the verification context, on a copy of the work dir.
        sandbox = RemoteSandbox(self.client, self.created)
        sandbox.agent_phase_over = True  # no setup commands now
        result = self.verifier(sandbox, self.task)
        if isinstance(result, VerifyResult):
            return result
        reward = None if result is None else float(result)
        if reward is None:
            raise RolloutNotScorable(f"rollout {self.rollout_id}: the verifier gave no reward")
        return VerifyResult(env_reward=reward, done=True, metrics={"status": summary.status, "turns": summary.turns})

    def close(self) -> None:
        """Stop the rollout and free its slot (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.client.delete(self.rollout_id)
        except Exception as exc:  # a service restart already dropped it; the trace is on its volume
            log.warning("closing rollout %s: %s", self.rollout_id, exc)


class OpenCodeServiceSessionFactory(ResourceSessionFactory[OpenCodeServiceSession]):
    """Start OpenCode rollouts for a fixed task set.

    ``tasks``: the service's ``Task`` models (or dicts of them: instruction, held-out tests, limits);
    a TRL prompt is matched to its task by the instruction text. ``sampling``: TRL's training policy,
    forced on every model call the agent makes (OpenCode would otherwise pick its own temperature).
    ``chat_template_kwargs``: the trainer's chat template settings (``{"enable_thinking": false}``),
    forced on every model call too, so the engine renders the prompts the trainer tokenizes; TRL's
    harness passes only its sampling policy to the factory. With several replicas behind
    ``base_url``'s name (Swarm), each rollout starts on the one with the most free slots and its
    session keeps every later call on that replica (``ReplicaPool``). ``verifier``: scores a
    rollout instead of the service's held-out tests (see ``Verifier``; picklable, e.g. a module-level
    function). ``agent``: the coding agent each rollout runs.
    """

    def __init__(
        self,
        base_url: str,
        tasks: Sequence[Task | Mapping[str, Any]],
        sampling: dict[str, Any] | None = None,
        model: str | None = None,
        wait_timeout_s: float = 900.0,
        request_timeout_s: float = 30.0,
        chat_template_kwargs: dict[str, Any] | None = None,
        verifier: Verifier | None = None,
        agent: CodingAgent = "opencode",
    ) -> None:
        self.base_url = base_url
        self.agent = agent
        self.verifier = verifier
        validated = [Task.model_validate(t) for t in tasks]
        self.tasks = {t.instruction: t for t in validated}
        if len(self.tasks) != len(validated):
            raise ValueError("two tasks share an instruction; a prompt must identify one task")
        self.sampling = dict(sampling or {})
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.model = model
        self.wait_timeout_s = wait_timeout_s
        self.request_timeout_s = request_timeout_s
        self._replicas: ReplicaPool | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_replicas": None}

    @property
    def replicas(self) -> ReplicaPool:
        """The service's replicas and their HTTP clients, made on first use in this process."""
        if self._replicas is None:
            self._replicas = ReplicaPool(self.base_url, timeout_s=self.request_timeout_s)
        return self._replicas

    def task_for(self, task: Any) -> Task:
        """The full task (with held-out tests) a prompt, ``Task`` or task dict stands for."""
        if isinstance(task, Task):
            return task
        if isinstance(task, Mapping) and "tests" in task:
            return Task.model_validate(task)
        instruction = task_instruction(task)
        if instruction not in self.tasks:
            raise KeyError(f"no task with the instruction {instruction[:80]!r}...; the factory knows {len(self.tasks)}")
        return self.tasks[instruction]

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> OpenCodeServiceSession:
        """Start a rollout of the task; the seed and episode id only label it (the task is fixed)."""
        spec = self.task_for(task)
        sampling = {**self.sampling, "chat_template_kwargs": self.chat_template_kwargs}
        if not self.chat_template_kwargs:
            del sampling["chat_template_kwargs"]
        client, created = self.replicas.start(
            lambda replica: replica.create_rollout(spec, sampling=sampling, model=self.model, agent=self.agent)
        )
        log.debug(
            "rollout %s started on %s for task %s (group seed %s, episode %s)",
            created.rollout_id,
            client.base_url,
            spec.task_id,
            seed,
            episode_id,
        )
        return OpenCodeServiceSession(client, created, self.wait_timeout_s, spec, self.verifier)
