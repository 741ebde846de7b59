"""Starting rollouts, shared by both front ends: the HTTP API and OpenEnv's ``run_rollout`` tool."""

from typing import Any

from opencode_env_client.models import RolloutRequest

from ..proxy.chat_completions import UPSTREAM_ERRORS, Proxy
from ..rollouts.manager import CapacityError, RolloutManager
from ..rollouts.rollout import Rollout
from ..settings import Settings, normalize_upstream


class ServiceError(Exception):
    """A request the service refuses; ``status`` is its HTTP status, ``data`` extra detail."""

    def __init__(self, status: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.data = data or {}


class RolloutService:
    """Checks a rollout request (upstream allowed, service not stopping), resolves its model and
    takes a slot for it. ``proxy`` is set once the service's HTTP client exists (at start-up)."""

    def __init__(self, settings: Settings, manager: RolloutManager) -> None:
        self.settings = settings
        self.manager = manager
        self.proxy: Proxy | None = None
        self._models: dict[str, str] = {}  # upstream base URL -> the first model it lists

    async def model_for(self, request: RolloutRequest) -> str:
        """The model the rollout's calls name: the request's, INFERENCE_MODEL, or the upstream's first."""
        if request.model or self.settings.inference_model:
            return request.model or self.settings.inference_model
        base = normalize_upstream(request.upstream_url or self.settings.inference_url)
        if base not in self._models:
            try:
                listing = await self.proxy.get_json(f"{base}/v1/models", timeout_s=10)
                self._models[base] = listing["data"][0]["id"]
            except (*UPSTREAM_ERRORS, ValueError, KeyError, IndexError, TypeError) as exc:
                raise ServiceError(502, f"cannot list models at {base}/v1/models ({exc}); pass 'model'") from None
        return self._models[base]

    async def start(self, request: RolloutRequest) -> Rollout:
        """Start a rollout, or raise ``ServiceError`` (403 upstream not allowed, 502 no model, 503 busy or stopping)."""
        if request.upstream_url is not None and not self.settings.upstream_allowed(request.upstream_url):
            raise ServiceError(
                403,
                f"upstream_url {request.upstream_url!r} is not allowed: the service sends model "
                "calls only to INFERENCE_URL and the URLs in ALLOWED_UPSTREAMS",
            )
        if self.manager.stopping.is_set():
            raise ServiceError(503, "the service is shutting down; retry once it is back")
        model = await self.model_for(request)
        try:
            return self.manager.create(request, model)
        except CapacityError as exc:
            raise ServiceError(
                503,
                str(exc),
                {"active_rollouts": self.manager.active, "max_rollouts": self.settings.max_concurrent_rollouts},
            ) from None
