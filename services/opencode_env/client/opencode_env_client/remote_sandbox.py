"""A ``SandboxBackend`` served by opencode-env, for upstream OpenEnv's OpenCode harness.

Upstream's ``OpenCodeSessionFactory(config=..., sandbox_backend=..., mode=..., verifier=...)`` runs
unchanged on it: pass ``sandbox_backend=RemoteSandboxBackend("http://opencode-env:8000")``. Each
``create()`` is one rollout of the service with an external agent (``agent: "external"``); the
handle's operations are the service's sandbox API (``/rollouts/{id}/sandbox/...``), so the agent
runs isolated as the service's sandboxes are (a uid of its own, no network but its proxy port).

What the handle does for upstream's harness, besides relaying:

- ``/home/user`` (``home``) in commands, paths and environment values is the rollout's sandbox:
  ``/home/user/workdir`` its work dir, ``/home/user`` its home, where the service has put upstream's
  directories and ``~/.opencode/bin/opencode`` (the image's OpenCode: the install step is skipped).
- Upstream's in-sandbox proxy (``interception.py``) is not run: the service's proxy stands in for
  it. Starting it records its port and trace path; its ``/healthz`` answers; ``opencode.json`` and
  the agent's ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` are pointed at the rollout's proxy port and key
  (the only address a sandbox reaches), whatever base URL the harness wrote.
- Reading the proxy trace returns the service's recording of the rollout's model calls (prompt and
  completion token ids and logprobs from the engine), never a file in the sandbox, which the agent
  could have rewritten.
- Commands before the first background job (the agent's) are the harness's setup (its install
  probe, ``setup_shell``): marked so, they may reach the operator's ``SETUP_NETWORK_ALLOW`` indexes
  while each runs (the service kills the uid's processes after each).
- Once the agent's job has ended (its ``wait`` returned or timed out), the rollout is finished: the
  service kills every process of the agent, and every later operation (the verifier's) runs in the
  trusted verification context, on a copy of the work dir, as a uid no agent runs as.
"""

import json
import logging
import re
import shlex
import threading
from dataclasses import dataclass
from typing import Any

from .client import OpenCodeEnvClient
from .models import CreatedRollout, Limits, SandboxCommand, Task, Turn, normalize_upstream

log = logging.getLogger("opencode_env_client.remote_sandbox")

UPSTREAM_HOME = "/home/user"
PROXY_SCRIPT = "interception.py"
MAX_WALL_S = 3600.0


@dataclass
class ExecResult:
    """Result of a synchronous command (upstream's ``opencode_env.sandbox.base.ExecResult``, field for field)."""

    exit_code: int
    stdout: str
    stderr: str


@dataclass
class _ProxyArgs:
    """What the harness asked of its in-sandbox proxy."""

    port: int
    trace_path: str
    upstream_url: str | None


def parse_proxy_command(command: str) -> _ProxyArgs | None:
    """The port, trace path and upstream of upstream's proxy start command; None for another command."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        return None
    if PROXY_SCRIPT not in tokens:
        return None
    args = tokens[tokens.index(PROXY_SCRIPT) + 1 :]

    def option(name: str) -> str | None:
        return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None

    return _ProxyArgs(
        port=int(option("--port") or 7000),
        trace_path=option("--trace") or "/tmp/opencode-proxy-trace.jsonl",
        upstream_url=option("--upstream-url"),
    )


def upstream_trace_records(trace: dict[str, Any], turns: list[Turn]) -> list[dict[str, Any]]:
    """The service's recording as the JSON records upstream's proxy writes to its trace file
    (``TurnRecord``: request, response, completion token ids, texts and logprobs, finish reason,
    latency), one per successful model call, each also an OpenEnv trace entry (prompt token ids,
    loss mask, ``metadata.node_id``) as ``TrainingTrace.to_trace_entries`` writes them.

    ``trace`` is the rollout's ``TrainingTrace`` (``GET /rollouts/{id}/trace``), ``turns`` its
    recorded turns (``GET /rollouts/{id}/turns``)."""
    by_turn = {t.turn: t for t in turns}
    records = []
    for row in trace["turns"]:
        metadata = {**row["metadata"], "node_id": row["node_id"]}
        turn = by_turn[metadata["turn"]]
        records.append(
            {
                "turn": turn.turn,
                "request": row["request"],
                "response": row["response"],
                "logprobs": None,
                "completion_tokens": turn.completion_tokens,
                "completion_token_ids": row["completion_token_ids"],
                "per_token_logps": row["per_token_logps"],
                "finish_reason": turn.finish_reason,
                "latency_s": turn.latency_s,
                "timestamp": turn.timestamp,
                "prompt_token_ids": row["prompt_token_ids"],
                "loss_mask": row["loss_mask"],
                "metadata": metadata,
            }
        )
    return records


class RemoteJob:
    """A background command in the sandbox (upstream's ``BgJob``)."""

    def __init__(self, sandbox: "RemoteSandbox", job_id: str, pid: int) -> None:
        self._sandbox = sandbox
        self.job_id = job_id
        self._pid = pid

    @property
    def pid(self) -> int:
        return self._pid

    def wait(self, timeout: float | None = None) -> int:
        """Block until the command exits; ``TimeoutError`` after ``timeout`` seconds (default: the wall limit).
        Either way the agent phase ends here: the rollout is finished and its processes killed."""
        sandbox = self._sandbox
        try:
            job = sandbox.client.wait_job(sandbox.sandbox_id, self.job_id, timeout or MAX_WALL_S)
        finally:
            sandbox.end_agent_phase()
        if job.running:
            raise TimeoutError(f"job {self.job_id} in sandbox {sandbox.sandbox_id} still running after {timeout}s")
        return int(job.exit_code if job.exit_code is not None else -1)

    def kill(self) -> None:
        """SIGKILL the command's process group (a job of a finished rollout is already gone)."""
        sandbox = self._sandbox
        if not sandbox.agent_phase_over:
            sandbox.client.kill_job(sandbox.sandbox_id, self.job_id)


class ServiceProxyJob:
    """Stands for upstream's in-sandbox proxy: the service's proxy records the rollout's calls."""

    pid = 0

    def __init__(self, sandbox: "RemoteSandbox") -> None:
        self._sandbox = sandbox

    def wait(self, timeout: float | None = None) -> int:
        """Block until the rollout is final (the proxy then refuses calls); ``TimeoutError`` before."""
        summary = self._sandbox.client.wait(self._sandbox.sandbox_id, timeout or MAX_WALL_S)
        if not summary.final:
            raise TimeoutError(f"rollout {self._sandbox.sandbox_id} still {summary.status}")
        return 0

    def kill(self) -> None:
        """Nothing to kill: the service's proxy serves the rollout until it is final."""


class RemoteSandbox:
    """One sandbox (one rollout) of the service (upstream's ``SandboxHandle``); ``home``: the path
    the rollout maps to its home (its ``sandbox_home``), None for a rollout without one."""

    def __init__(
        self,
        client: OpenCodeEnvClient,
        created: CreatedRollout,
        home: str | None = None,
        envs: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.created = created
        self.home = home
        self.envs = dict(envs or {})
        self.agent_started = False  # until the first background job: its commands are setup commands
        self.agent_phase_over = False
        self._proxy: _ProxyArgs | None = None
        self._upstream = normalize_upstream(client.status(created.rollout_id).upstream_url)
        self._lock = threading.Lock()

    @property
    def sandbox_id(self) -> str:
        return self.created.rollout_id

    def training_trace(self) -> dict[str, Any]:
        """The service's ``TrainingTrace`` of this rollout (engine ids, logprobs, loss masks)."""
        return self.client.training_trace(self.sandbox_id)

    # --- the agent phase's end -------------------------------------------------------------------
    def end_agent_phase(self) -> None:
        """Finish the rollout (the service kills the agent's processes): later operations run in the
        verification context. Idempotent."""
        with self._lock:
            if not self.agent_phase_over:
                self.client.finish(self.sandbox_id)
                self.agent_phase_over = True

    # --- upstream's harness: its proxy, config and environment -----------------------------------
    @staticmethod
    def _model_endpoint(url: str) -> bool:
        """Whether ``url`` is a model endpoint (the harness's proxy or an upstream): from a sandbox,
        every model call goes through the rollout's proxy port."""
        return url.startswith(("http://", "https://"))

    def _point_at_service(self, content: str) -> str:
        """An ``opencode.json`` whose providers call the rollout's proxy port with its key."""
        try:
            config = json.loads(content)
        except ValueError:
            return content
        providers = config.get("provider") if isinstance(config, dict) else None
        if not isinstance(providers, dict):
            return content
        for provider in providers.values():
            options = provider.get("options") if isinstance(provider, dict) else None
            if isinstance(options, dict) and self._model_endpoint(str(options.get("baseURL", ""))):
                options["baseURL"] = self.created.sandbox_proxy_base_url
                options["apiKey"] = self.created.api_key
        return json.dumps(config, indent=2)

    def _env(self, envs: dict[str, str] | None) -> dict[str, str]:
        env = {**self.envs, **(envs or {})}
        if "OPENAI_BASE_URL" in env and self._model_endpoint(env["OPENAI_BASE_URL"]):
            env["OPENAI_BASE_URL"] = self.created.sandbox_proxy_base_url
            env["OPENAI_API_KEY"] = self.created.api_key
        env.pop("OPENCODE_UPSTREAM_API_KEY", None)  # the service holds the upstream's key
        return env

    def _start_service_proxy(self, proxy: _ProxyArgs) -> ServiceProxyJob:
        if proxy.upstream_url and normalize_upstream(proxy.upstream_url) != self._upstream:
            raise ValueError(
                f"the harness's upstream {proxy.upstream_url!r} is not the one this rollout's model calls go "
                f"to ({self._upstream!r}): pass upstream_url= to RemoteSandboxBackend"
            )
        self._proxy = proxy
        return ServiceProxyJob(self)

    def _is_health_probe(self, cmd: str) -> bool:
        return bool(self._proxy) and bool(
            re.search(rf"https?://(127\.0\.0\.1|localhost):{self._proxy.port}/healthz\b", cmd)
        )

    # --- SandboxHandle -----------------------------------------------------------------------------
    def exec(
        self, cmd: str, *, envs: dict[str, str] | None = None, cwd: str | None = None, timeout: float | None = 60
    ) -> ExecResult:
        """Run a command to completion (as the agent's uid while it runs, in the verification context after)."""
        if self._is_health_probe(cmd) and not self.agent_phase_over:
            return ExecResult(0, '{"status":"ok"}', "")
        command = SandboxCommand(
            command=cmd,
            env=self._env(envs),
            cwd=cwd,
            timeout_s=min(timeout or MAX_WALL_S, MAX_WALL_S),
            setup=not (self.agent_started or self.agent_phase_over),
        )
        result = self.client.sandbox_exec(self.sandbox_id, command)
        code = result.exit_code if result.exit_code is not None else 124
        stderr = result.stderr + (f"\ntimed out after {timeout}s" if result.timed_out else "")
        return ExecResult(code, result.stdout, stderr)

    def start_bg(self, cmd: str, *, envs: dict[str, str] | None = None, cwd: str | None = None) -> Any:
        """Start a background command as the agent's uid; upstream's proxy start is answered by the service's proxy."""
        proxy = parse_proxy_command(cmd)
        if proxy is not None:
            return self._start_service_proxy(proxy)
        job = self.client.start_job(self.sandbox_id, SandboxCommand(command=cmd, env=self._env(envs), cwd=cwd))
        self.agent_started = True
        return RemoteJob(self, job.job_id, job.pid)

    def write_text(self, path: str, content: str) -> None:
        """Write a text file (parent directories made)."""
        if path.endswith("opencode.json"):
            content = self._point_at_service(content)
        self.client.sandbox_write(self.sandbox_id, path, content)

    def read_text(self, path: str) -> str:
        """Read a text file; the proxy's trace path reads the service's recording. ``FileNotFoundError`` if absent."""
        if self._proxy is not None and path == self._proxy.trace_path:
            records = upstream_trace_records(self.training_trace(), self.client.turns(self.sandbox_id))
            return "".join(json.dumps(record) + "\n" for record in records)
        file = self.client.sandbox_read(self.sandbox_id, path)
        if not file.exists:
            raise FileNotFoundError(f"{path} (sandbox {self.sandbox_id})")
        return file.content or ""

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists; upstream's proxy script always does (the service provides the proxy)."""
        if self.home is not None and path == f"{self.home}/proxy/{PROXY_SCRIPT}":
            return True
        return self.client.sandbox_exists(self.sandbox_id, path)

    def kill(self) -> None:
        """Stop the rollout and remove its sandbox (its recorded trace stays on the service)."""
        try:
            self.client.delete(self.sandbox_id)
        except Exception as exc:  # already gone (a restart, or closed twice)
            log.debug("closing sandbox %s: %s", self.sandbox_id, exc)


class RemoteSandboxBackend:
    """Upstream's ``SandboxBackend`` on the OpenCode env service: ``create()`` makes a rollout.

    ``upstream_url``/``model``: where the rollout's model calls go (default: the stack's inference
    and its model); the harness's base URL must name the same upstream. ``sampling``: fields forced
    on every model call (e.g. TRL's temperature, ``chat_template_kwargs``). ``limits``: the
    service's per-rollout ``Limits`` (the wall limit is the harness's ``timeout_s`` unless set).
    Picklable: the HTTP client is made in the process that uses it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        upstream_url: str | None = None,
        model: str | None = None,
        sampling: dict[str, Any] | None = None,
        top_logprobs: int | None = None,
        limits: Limits | dict[str, Any] | None = None,
        home: str = UPSTREAM_HOME,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.base_url = base_url
        self.upstream_url = upstream_url
        self.model = model
        self.sampling = dict(sampling or {})
        self.top_logprobs = top_logprobs
        self.limits = Limits.model_validate(limits) if limits is not None else None
        self.home = home
        self.request_timeout_s = request_timeout_s
        self._client: OpenCodeEnvClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> OpenCodeEnvClient:
        """The service's HTTP client, made on first use in this process."""
        if self._client is None:
            self._client = OpenCodeEnvClient(self.base_url, timeout_s=self.request_timeout_s)
        return self._client

    def create(
        self, *, timeout_s: int = 900, envs: dict[str, str] | None = None, metadata: dict[str, str] | None = None
    ) -> RemoteSandbox:
        """A fresh sandbox: a rollout whose agent the harness starts through the sandbox API."""
        limits = self.limits or Limits(wall_s=min(float(timeout_s), MAX_WALL_S))
        label = (metadata or {}).get("episode_id", "")
        task = Task(task_id=label, instruction="(an external harness writes the instruction)", limits=limits)
        created = self.client.create_rollout(
            task,
            agent="external",
            sampling=self.sampling,
            model=self.model,
            upstream_url=self.upstream_url,
            top_logprobs=self.top_logprobs,
            sandbox_home=self.home,
        )
        return RemoteSandbox(self.client, created, self.home, envs)
