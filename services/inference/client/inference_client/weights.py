"""Weight updates without NCCL: publish a checkpoint to a shared volume, reload it in place.

For CPU hosts, and GPU hosts where an NCCL group cannot form. The trainer saves the model into a
folder both containers mount, then asks vLLM (started with ``VLLM_SERVER_DEV_MODE=1``) to pause,
reload the weights in place, drop its prefix cache, record the new weight version and resume.
Every step has a timeout and any failure raises ``WeightSyncError`` naming the step; the server is
resumed even when a step fails, so it is never left paused.
"""

import logging
import shutil
import time
from pathlib import Path
from typing import Any, Protocol

import httpx

log = logging.getLogger("inference_client.weights")


class WeightSyncError(RuntimeError):
    """A weight update did not complete; the message names the failing step."""


class SavesPretrained(Protocol):
    """Anything with transformers' ``save_pretrained`` (a model, a tokenizer)."""

    def save_pretrained(self, save_directory: str, **kwargs: Any) -> Any: ...


def publish_checkpoint(model: SavesPretrained, root: Path, version: str, keep: int = 2) -> Path:
    """Save ``model`` as safetensors to ``root/version`` atomically; keep the newest ``keep`` versions.

    Writes to a temporary folder first and renames it, so the server never reads a half-written
    checkpoint. Returns the checkpoint folder.
    """
    root.mkdir(parents=True, exist_ok=True)
    target = root / version
    staging = root / f".{version}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(str(staging), safe_serialization=True)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    published = sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.stat().st_mtime
    )
    for old in published[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return target


class WeightSyncClient:
    """Drives vLLM's dev-mode endpoints to load a checkpoint in place."""

    def __init__(self, base_url: str, timeout_s: float = 120.0, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> "WeightSyncClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, step: str, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise WeightSyncError(f"{step}: no answer from {self.base_url}{path} within {self.timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            raise WeightSyncError(f"{step}: {self.base_url}{path} unreachable: {exc}") from exc
        if response.status_code >= 400:
            raise WeightSyncError(f"{step}: {method} {path} -> HTTP {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else None

    def weight_version(self) -> str:
        """The weight version the server reports (``GET /weight_info``)."""
        info = self._call("weight version", "GET", "/weight_info")
        return str(info.get("weight_version") if isinstance(info, dict) else info)

    def reload(self, server_path: str, version: str) -> str:
        """Load the checkpoint at ``server_path`` (a path inside the inference container) in place.

        Returns the weight version the server reports afterwards, which equals ``version``.
        """
        started = time.monotonic()
        self._call("pause", "POST", "/pause", params={"mode": "wait"})
        try:
            result = self._call(
                "reload_weights",
                "POST",
                "/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": server_path}},
            )
            errors = [r for r in (result or {}).get("results", []) if r not in (None, {})]
            if errors:
                raise WeightSyncError(f"reload_weights: workers reported {errors}")
            self._call("reset_prefix_cache", "POST", "/reset_prefix_cache")
            self._call("update_weight_version", "POST", "/update_weight_version", json={"new_version": version})
        except BaseException:
            try:
                self._call("resume", "POST", "/resume")
            except WeightSyncError as resume_error:  # report the step that failed first
                log.error("could not resume the inference server after a failed update: %s", resume_error)
            raise
        self._call("resume", "POST", "/resume")
        reported = self.weight_version()
        if reported != version:
            raise WeightSyncError(f"verify: server reports weight version {reported!r}, expected {version!r}")
        log.info("inference weights now %s (%s, %.2fs)", version, server_path, time.monotonic() - started)
        return reported
