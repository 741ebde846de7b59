"""Upstream's OpenCode sessions on ``RemoteSandboxBackend``, trainable by TRL's loop-owning harness.

TRL (1.16) trains a loop-owning session only if it has ``fetch_training_trace()`` (OpenEnv's
``TrainableSession``); upstream's ``OpenCodeSession`` offers ``fetch_proxy_trace()``. Wrapping
upstream's factory in ``ServiceTracedSessionFactory`` adds it: the ``TrainingTrace`` is the
service's recording of the rollout (engine token ids, logprobs, loss masks), never a file the agent
could have rewritten. Everything else is upstream's session, unchanged.
"""

from typing import Any

from openenv.core.harness import ResourceSessionFactory, TrainingTrace, VerifyResult

from .remote_sandbox import RemoteSandbox


class ServiceTracedSession:
    """An upstream harness session whose sandbox is a ``RemoteSandbox``, plus ``fetch_training_trace``."""

    def __init__(self, session: Any) -> None:
        if not isinstance(getattr(session, "sandbox", None), RemoteSandbox):
            raise TypeError("the session's sandbox is not a RemoteSandbox: make it with RemoteSandboxBackend")
        self.session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Upstream's wait (the agent's job); the rollout is finished when it returns."""
        return self.session.wait_for_completion(timeout_s)

    def fetch_training_trace(self) -> TrainingTrace:
        """The service's recording of the rollout's model calls."""
        return TrainingTrace.model_validate(self.session.sandbox.training_trace())

    def verify(self, transcript: list[Any], final_state: Any = None) -> VerifyResult:
        """Upstream's verify: the verifier, in the trusted verification context."""
        return self.session.verify(transcript, final_state)

    def close(self) -> None:
        """Upstream's close (removes the rollout's sandbox)."""
        self.session.close()


class ServiceTracedSessionFactory(ResourceSessionFactory):
    """Wraps upstream's ``OpenCodeSessionFactory`` (on ``RemoteSandboxBackend``) for TRL's loop."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> ServiceTracedSession:
        """Upstream's session for ``task``, trainable."""
        return ServiceTracedSession(self.inner.create(task, seed=seed, episode_id=episode_id))
