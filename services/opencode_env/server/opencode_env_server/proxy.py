"""The transparent ``/v1/chat/completions`` relay between an agent and the inference server.

The agent's request goes upstream with ``logprobs`` and ``return_token_ids`` forced on, the model
name and sampling fields of the rollout, and ``max_tokens`` clamped to the rollout's budget. The
reply is relayed verbatim (SSE chunks as they arrive, or the JSON body) while the engine's prompt ids,
completion ids and logprobs are recorded as one turn.
"""

import asyncio
import time
from typing import Any, AsyncIterator, Optional, Protocol

import httpx
import orjson
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from .trace import Turn

JSON_HEADERS = {"content-type": "application/json"}


class RolloutCalls(Protocol):
    """What the proxy needs from a rollout (see rollouts.Rollout)."""

    upstream_url: str
    model: str
    sampling: dict[str, Any]

    def admit_call(self) -> int: ...
    def record(self, turn: Turn) -> None: ...
    def infra_failure(self, message: str) -> None: ...
    def next_turn_index(self) -> int: ...


def error_response(status: int, message: str, kind: str = "invalid_request_error") -> Response:
    """An OpenAI-style error body."""
    return Response(orjson.dumps({"error": {"message": message, "type": kind}}), status_code=status,
                    media_type="application/json")


def _logprobs(choice: dict[str, Any]) -> list[float]:
    return [entry["logprob"] for entry in ((choice.get("logprobs") or {}).get("content") or [])]


class StreamAccumulator:
    """Rebuilds a chat completion (and its token ids and logprobs) from SSE bytes."""

    def __init__(self) -> None:
        self._buffer = b""
        self.prompt_ids: list[int] = []
        self.completion_ids: list[int] = []
        self.logps: list[float] = []
        self.content: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: Optional[str] = None
        self.usage: Optional[dict[str, Any]] = None
        self.model: Optional[str] = None

    def feed(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data: {"):
                self._chunk(orjson.loads(line[6:]))

    def _chunk(self, chunk: dict[str, Any]) -> None:
        self.model = chunk.get("model", self.model)
        if chunk.get("prompt_token_ids"):
            self.prompt_ids = chunk["prompt_token_ids"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            self.completion_ids += choice.get("token_ids") or []
            self.logps += _logprobs(choice)
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = self.tool_calls.setdefault(call.get("index", 0), {"id": None, "type": "function",
                                                                         "function": {"name": "", "arguments": ""}})
                slot["id"] = call.get("id") or slot["id"]
                function = call.get("function") or {}
                slot["function"]["name"] += function.get("name") or ""
                slot["function"]["arguments"] += function.get("arguments") or ""
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def response(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return {"model": self.model, "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
                "usage": self.usage}


class Proxy:
    """Relays chat completions for rollouts over one shared HTTP connection pool."""

    def __init__(self, http: httpx.AsyncClient, weight_version_ttl_s: float = 0.25) -> None:
        self.http = http
        self.weight_version_ttl_s = weight_version_ttl_s
        self._versions: dict[str, tuple[float, asyncio.Future]] = {}

    def weight_version(self, base_url: str) -> asyncio.Future:
        """The inference server's weight version (vLLM dev mode; None if it has none).

        Read at most once per ``weight_version_ttl_s`` per upstream and shared by the calls in that
        window, so the lookup stays off the per-call cost; a turn may carry a version up to that
        old across a weight update.
        """
        now = time.monotonic()
        cached = self._versions.get(base_url)
        if cached is None or now - cached[0] > self.weight_version_ttl_s:
            cached = (now, asyncio.ensure_future(self._fetch_version(base_url)))
            self._versions[base_url] = cached
        return cached[1]

    async def _fetch_version(self, base_url: str) -> Optional[str]:
        try:
            response = await self.http.get(f"{base_url}/weight_info", timeout=5.0)
            return str(response.json().get("weight_version")) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None

    def prepare(self, rollout: RolloutCalls, body: dict[str, Any], max_tokens: int) -> dict[str, Any]:
        """The upstream request: the agent's, with the rollout's model, sampling and token budget."""
        forwarded = dict(body)
        forwarded.update(rollout.sampling)
        forwarded["model"] = rollout.model
        forwarded["logprobs"] = True
        forwarded["return_token_ids"] = True
        requested = forwarded.pop("max_completion_tokens", None) or forwarded.get("max_tokens")
        forwarded["max_tokens"] = min(int(requested), max_tokens) if requested else max_tokens
        if forwarded.get("stream"):
            forwarded["stream_options"] = {**(forwarded.get("stream_options") or {}), "include_usage": True}
        return forwarded

    async def relay(self, rollout: RolloutCalls, body: dict[str, Any]) -> Response:
        """Forward one call for ``rollout`` and record it; the reply goes back unchanged."""
        max_tokens = rollout.admit_call()
        forwarded = self.prepare(rollout, body, max_tokens)
        index = rollout.next_turn_index()
        version = self.weight_version(rollout.upstream_url)
        started = time.monotonic()
        url = f"{rollout.upstream_url}/v1/chat/completions"
        trainable = bool(body.get("tools"))
        if forwarded.get("stream"):
            return await self._stream(rollout, url, forwarded, index, version, started, trainable)
        try:
            upstream = await self.http.post(url, content=orjson.dumps(forwarded), headers=JSON_HEADERS)
        except httpx.HTTPError as exc:
            return await self._failed(rollout, f"inference upstream {url}: {type(exc).__name__}: {exc}")
        if upstream.status_code >= 400:
            return await self._upstream_error(rollout, upstream.status_code, upstream.content, forwarded, index,
                                              version, started, trainable, stream=False)
        latency = time.monotonic() - started

        async def record() -> None:
            reply = orjson.loads(upstream.content)
            choice = (reply.get("choices") or [{}])[0]
            rollout.record(Turn(
                turn=index, request=forwarded, response=reply, prompt_token_ids=reply.get("prompt_token_ids") or [],
                completion_token_ids=choice.get("token_ids") or [], per_token_logps=_logprobs(choice),
                finish_reason=choice.get("finish_reason"), latency_s=latency,
                weight_version=await version, stream=False, trainable=trainable,
            ))

        # Recorded right after the reply is sent (as for streams), not on the agent's critical path.
        return Response(upstream.content, status_code=upstream.status_code, media_type="application/json",
                        background=BackgroundTask(record))

    async def _stream(self, rollout, url, forwarded, index, version, started, trainable) -> Response:
        request = self.http.build_request("POST", url, content=orjson.dumps(forwarded), headers=JSON_HEADERS)
        try:
            upstream = await self.http.send(request, stream=True)
        except httpx.HTTPError as exc:
            return await self._failed(rollout, f"inference upstream {url}: {type(exc).__name__}: {exc}")
        if upstream.status_code >= 400:
            content = await upstream.aread()
            await upstream.aclose()
            return await self._upstream_error(rollout, upstream.status_code, content, forwarded, index, version,
                                              started, trainable, stream=True)
        acc = StreamAccumulator()

        async def relay_chunks() -> AsyncIterator[bytes]:
            try:
                async for data in upstream.aiter_raw():
                    acc.feed(data)
                    yield data
            except httpx.HTTPError as exc:
                rollout.infra_failure(f"inference stream broke: {type(exc).__name__}: {exc}")
                return
            finally:
                await upstream.aclose()
            rollout.record(Turn(
                turn=index, request=forwarded, response=acc.response(), prompt_token_ids=acc.prompt_ids,
                completion_token_ids=acc.completion_ids, per_token_logps=acc.logps, finish_reason=acc.finish_reason,
                latency_s=time.monotonic() - started, weight_version=await version, stream=True, trainable=trainable,
            ))

        return StreamingResponse(relay_chunks(), status_code=upstream.status_code,
                                 media_type=upstream.headers.get("content-type", "text/event-stream"))

    async def _failed(self, rollout: RolloutCalls, message: str) -> Response:
        rollout.infra_failure(message)
        return error_response(502, message, "upstream_error")

    async def _upstream_error(self, rollout, status, content, forwarded, index, version, started, trainable, stream) -> Response:
        text = content.decode(errors="replace")[:2000]
        rollout.record(Turn(
            turn=index, request=forwarded, response={}, prompt_token_ids=[], completion_token_ids=[], per_token_logps=[],
            finish_reason=None, latency_s=time.monotonic() - started, weight_version=await version, stream=stream,
            trainable=trainable, upstream_status=status, upstream_error=text,
        ))
        if status >= 500:
            rollout.infra_failure(f"inference upstream answered {status}: {text[:300]}")
        return Response(content, status_code=status, media_type="application/json")
