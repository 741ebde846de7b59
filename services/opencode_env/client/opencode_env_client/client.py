"""Synchronous HTTP client of the OpenCode environment's rollout API; answers are the typed models
of ``opencode_env_client.models``."""

from collections.abc import Mapping
from typing import Any

import httpx

from .models import (
    AgentName,
    CreatedRollout,
    Health,
    RolloutRequest,
    RolloutSummary,
    SandboxCommand,
    SandboxCommandResult,
    SandboxFile,
    SandboxJob,
    SandboxPath,
    SandboxWrite,
    Task,
    Turn,
    Verification,
)


class OpenCodeEnvError(RuntimeError):
    """The service answered with an error, or could not be reached; ``status`` is None when unreachable."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServiceBusyError(OpenCodeEnvError):
    """Every rollout slot is taken (HTTP 503); retry later or raise ``MAX_CONCURRENT_ROLLOUTS``."""


class OpenCodeEnvClient:
    """Create, wait for, score and close rollouts (``POST /rollouts`` and friends).

    Every call has a timeout; waiting is done in server-side long polls of at most ``poll_s``.
    """

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 30.0,
        poll_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> "OpenCodeEnvClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, timeout: float | None = None, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, timeout=timeout or self.timeout_s, **kwargs)
        except httpx.HTTPError as exc:
            raise OpenCodeEnvError(f"{method} {self.base_url}{path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            message = detail.get("message", detail) if isinstance(detail, dict) else detail
            error = ServiceBusyError if response.status_code == 503 else OpenCodeEnvError
            raise error(f"{method} {path} -> HTTP {response.status_code}: {message}", response.status_code)
        return response

    def health(self, timeout_s: float | None = None) -> Health:
        """``GET /health``: status, rollout capacity and this replica's totals."""
        return Health.model_validate(self._request("GET", "/health", timeout=timeout_s).json())

    def create_rollout(
        self,
        task: Task | Mapping[str, Any],
        *,
        sampling: dict[str, Any] | None = None,
        model: str | None = None,
        upstream_url: str | None = None,
        upstream_api_key: str | None = None,
        agent: AgentName = "opencode",
        top_logprobs: int | None = None,
        sandbox_home: str | None = None,
    ) -> CreatedRollout:
        """Start a rollout of ``task``; returns its id, API key and proxy URL (``ValidationError`` on a bad task)."""
        request = RolloutRequest(
            task=Task.model_validate(task),
            agent=agent,
            sampling=sampling or {},
            model=model,
            upstream_url=upstream_url,
            upstream_api_key=upstream_api_key,
            top_logprobs=top_logprobs,
            sandbox_home=sandbox_home,
        )
        body = request.model_dump(exclude_none=True)
        return CreatedRollout.model_validate(self._request("POST", "/rollouts", json=body).json())

    def status(self, rollout_id: str) -> RolloutSummary:
        """``GET /rollouts/{id}``: status, turn count, limits hit."""
        return RolloutSummary.model_validate(self._request("GET", f"/rollouts/{rollout_id}").json())

    def wait(self, rollout_id: str, timeout_s: float) -> RolloutSummary:
        """Block until the rollout is final or ``timeout_s`` passed (see ``.final``)."""
        remaining = timeout_s
        while True:
            poll = max(0.0, min(self.poll_s, remaining))
            summary = RolloutSummary.model_validate(
                self._request(
                    "POST", f"/rollouts/{rollout_id}/wait", params={"timeout_s": poll}, timeout=poll + self.timeout_s
                ).json()
            )
            remaining -= poll
            if summary.final or remaining <= 0:
                return summary

    def training_trace(self, rollout_id: str) -> dict[str, Any]:
        """OpenEnv ``TrainingTrace`` (schema 1) of the rollout's engine calls."""
        return self._request("GET", f"/rollouts/{rollout_id}/trace").json()

    def turns(self, rollout_id: str) -> list[Turn]:
        """Every recorded turn, failed upstream calls included."""
        return [Turn(**t) for t in self._request("GET", f"/rollouts/{rollout_id}/turns").json()]

    def verify(self, rollout_id: str, timeout_s: float = 600.0) -> Verification:
        """Run the held-out tests: ``reward`` (None for infrastructure failures), ``passed``, ``total``, ``results``."""
        return Verification.model_validate(
            self._request("POST", f"/rollouts/{rollout_id}/verify", timeout=timeout_s).json()
        )

    def files(self, rollout_id: str) -> dict[str, str]:
        """Text of the rollout's work dir files (bounded)."""
        return self._request("GET", f"/rollouts/{rollout_id}/files").json()

    def logs(self, rollout_id: str) -> str:
        """The agent's output."""
        return self._request("GET", f"/rollouts/{rollout_id}/logs").text

    def finish(self, rollout_id: str) -> RolloutSummary:
        """End a rollout now as ``completed`` (its processes are killed); no-op for a final one."""
        return RolloutSummary.model_validate(self._request("POST", f"/rollouts/{rollout_id}/finish").json())

    # --- the sandbox API (``RemoteSandboxBackend``) ----------------------------------------------
    def sandbox_exec(self, rollout_id: str, command: SandboxCommand) -> SandboxCommandResult:
        """Run a command in the rollout's sandbox (the verification context once the rollout is final)."""
        body = command.model_dump()
        reply = self._request("POST", f"/rollouts/{rollout_id}/sandbox/exec", json=body, timeout=command.timeout_s + 30)
        return SandboxCommandResult.model_validate(reply.json())

    def sandbox_write(self, rollout_id: str, path: str, content: str) -> SandboxFile:
        """Write a text file in the sandbox."""
        body = SandboxWrite(path=path, content=content).model_dump()
        return SandboxFile.model_validate(
            self._request("POST", f"/rollouts/{rollout_id}/sandbox/write", json=body).json()
        )

    def sandbox_read(self, rollout_id: str, path: str) -> SandboxFile:
        """Read a text file of the sandbox (``exists`` False when there is none)."""
        body = SandboxPath(path=path).model_dump()
        return SandboxFile.model_validate(
            self._request("POST", f"/rollouts/{rollout_id}/sandbox/read", json=body).json()
        )

    def sandbox_exists(self, rollout_id: str, path: str) -> bool:
        """Whether a path exists in the sandbox."""
        body = SandboxPath(path=path).model_dump()
        return SandboxFile.model_validate(
            self._request("POST", f"/rollouts/{rollout_id}/sandbox/exists", json=body).json()
        ).exists

    def start_job(self, rollout_id: str, command: SandboxCommand) -> SandboxJob:
        """Start a background command as the agent's uid (while the rollout runs)."""
        body = command.model_dump()
        return SandboxJob.model_validate(
            self._request("POST", f"/rollouts/{rollout_id}/sandbox/jobs", json=body).json()
        )

    def wait_job(self, rollout_id: str, job_id: str, timeout_s: float) -> SandboxJob:
        """Wait for a background command (long polls of ``poll_s``); ``running`` if it outlived ``timeout_s``."""
        remaining = timeout_s
        while True:
            poll = max(0.0, min(self.poll_s, remaining))
            job = SandboxJob.model_validate(
                self._request(
                    "POST",
                    f"/rollouts/{rollout_id}/sandbox/jobs/{job_id}/wait",
                    params={"timeout_s": poll},
                    timeout=poll + self.timeout_s,
                ).json()
            )
            remaining -= poll
            if not job.running or remaining <= 0:
                return job

    def kill_job(self, rollout_id: str, job_id: str) -> SandboxJob:
        """SIGKILL a background command's process group."""
        return SandboxJob.model_validate(
            self._request("DELETE", f"/rollouts/{rollout_id}/sandbox/jobs/{job_id}").json()
        )

    def delete(self, rollout_id: str) -> None:
        """Stop the rollout and free its slot; its trace stays on the service's volume."""
        self._request("DELETE", f"/rollouts/{rollout_id}")
