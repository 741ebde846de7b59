"""The transparent ``/v1/chat/completions`` relay between an agent and the inference server.

The agent's request goes upstream with ``logprobs`` and ``return_token_ids`` forced on (and
``top_logprobs`` if the rollout asks for it), the model name and sampling fields of the rollout,
``max_tokens`` clamped to the rollout's budget, and the rollout's upstream key as the bearer token
(never seen by the agent). Of the agent's own fields only an allow-list is relayed (``AGENT_FIELDS``:
what shapes the prompt and the form of the reply); its sampling fields are dropped (the rollout's,
that is the trainer's, apply) and any other field is refused, so code in a sandbox that calls the
proxy with its seat's key cannot make the engine sample tokens the policy would not have chosen
(``allowed_token_ids``, guided decoding, ``min_tokens``, ``ignore_eos``, ``logit_bias``, ...).
The reply is relayed verbatim (SSE chunks as they arrive, or the JSON body) while the engine's
prompt ids, completion ids, token texts and logprobs are recorded as one turn. A rollout that
records no turns (upstream's ``black_box`` mode) has its calls relayed as the
agent made them, within the same budget.

This is the hot path of every agent step, so it runs on raw ASGI (no framework routing, request
or response objects) with aiohttp's client upstream; the turn is recorded after the reply went out.
"""

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
import orjson
from opencode_env_client.models import Turn

from .dialect import Dialect, Rendered, bearer_key, sse

JSON_HEADERS = {"content-type": "application/json"}
Send = Callable[[dict[str, Any]], Awaitable[None]]
# A dialect's rendering of the engine's chat completion (None: the chat-completions reply, relayed as it comes).
ReplyAs = Callable[[dict[str, Any]], Rendered] | None
ErrorAs = Callable[[int, str, str], bytes]
UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


class RolloutCalls(Protocol):
    """What the proxy needs from a rollout (see rollouts.Rollout)."""

    upstream_url: str
    upstream_api_key: str | None
    model: str
    sampling: dict[str, Any]
    record_turns: bool
    top_logprobs: int | None

    def admit_call(self, requested: int | None = None) -> int: ...
    def release(self, reserved: int) -> None: ...
    def record(self, turn: Turn) -> None: ...
    def infra_failure(self, message: str) -> None: ...
    def next_turn_index(self) -> int: ...


async def send_body(send: Send, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    """A complete HTTP response on raw ASGI."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


WARM_UP_TEXT = "ok"
# The canned reply of an agent's warm-up session (no upstream call, no turn recorded).
WARM_UP_COMPLETION = {
    "id": "warm-up",
    "object": "chat.completion",
    "created": 0,
    "model": "warm-up",
    "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
    "choices": [{"index": 0, "message": {"role": "assistant", "content": WARM_UP_TEXT}, "finish_reason": "stop"}],
}


def render(request: dict[str, Any], completion: dict[str, Any], stream: bool) -> Rendered:
    """A chat completion as the agent asked for it: the JSON body, or its chunks as SSE."""
    if not stream:
        return Rendered(orjson.dumps(completion))
    head = {key: completion[key] for key in ("id", "created", "model") if key in completion}
    chunks = []
    for choice in completion.get("choices") or []:
        delta = {key: value for key, value in (choice.get("message") or {}).items() if value is not None}
        for index, call in enumerate(delta.get("tool_calls") or []):
            delta["tool_calls"][index] = {**call, "index": index}
        chunks.append(
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [{"index": choice.get("index", 0), "delta": delta, "finish_reason": None}],
            }
        )
        chunks.append(
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [
                    {"index": choice.get("index", 0), "delta": {}, "finish_reason": choice.get("finish_reason")}
                ],
            }
        )
    chunks.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": completion.get("usage")})
    return Rendered(b"".join(sse(None, chunk) for chunk in chunks) + b"data: [DONE]\n\n", b"text/event-stream")


def error(status: int, message: str, kind: str) -> bytes:
    """An OpenAI-style error body."""
    return orjson.dumps({"error": {"message": message, "type": kind}})


async def send_error(send: Send, status: int, message: str, kind: str = "invalid_request_error") -> None:
    """An OpenAI-style error response."""
    await send_body(send, status, error(status, message, kind))


def request_error(body: Any) -> str | None:
    """Why a chat completion request cannot be relayed (None if it can): it must be an object with a
    ``messages`` list, one choice, and well-typed fields the proxy reads or budgets."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return "the body must be a JSON object with a 'messages' list"
    if body.get("n") not in (None, 1):
        return "'n' must be 1: each model call of a rollout is one sample (one trainable turn)"
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f"'{name}' must be a positive integer, got {value!r}"
    for name, kind in (("stream", bool), ("tools", list), ("stream_options", dict)):
        if body.get(name) is not None and not isinstance(body[name], kind):
            return f"'{name}' must be a {kind.__name__}, got {type(body[name]).__name__}"
    return None


def to_chat(body: Any) -> Any:
    """A chat-completions request as it is (``request_error`` checks it, as every dialect's translation)."""
    return body


# Relayed from a recorded rollout's calls as the agent sent them: they shape the prompt and the form
# of the reply, not the distribution its tokens are sampled from.
AGENT_FIELDS = frozenset(
    {
        "messages",
        "model",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "n",
        "user",
    }
)
# A forced tool call ("required", or a named function) is sampled under guided decoding.
FREE_TOOL_CHOICES = (None, "auto", "none")
# The distribution's knobs: the rollout's sampling settings (the trainer's) decide them; an agent's
# values are dropped. Also what the proxy sets itself (logprobs, ids).
SAMPLING_FIELDS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "seed",
        "chat_template_kwargs",
        "reasoning_effort",
        "logprobs",
        "top_logprobs",
        "return_token_ids",
    }
)


def refused_fields(body: dict[str, Any]) -> str | None:
    """Why a recorded rollout's call is refused (None if it is not): a field that is neither relayed
    nor one of the sampling fields the trainer sets would change what the engine samples."""
    unknown = sorted(set(body) - AGENT_FIELDS - SAMPLING_FIELDS)
    if not unknown:
        if body.get("tool_choice") not in FREE_TOOL_CHOICES:
            return (
                f"tool_choice {body['tool_choice']!r} not relayed: a forced tool call is sampled under guided "
                "decoding, not the policy's distribution; use 'auto' or 'none'"
            )
        return None
    return (
        f"field(s) {', '.join(map(repr, unknown))} not relayed: a recorded rollout's calls are sampled under "
        f"the trainer's settings only; allowed: {', '.join(sorted(AGENT_FIELDS))} (sampling fields are set "
        "by the trainer)"
    )


def _logprobs(choice: dict[str, Any]) -> list[float]:
    return [entry["logprob"] for entry in ((choice.get("logprobs") or {}).get("content") or [])]


def _token_texts(choice: dict[str, Any]) -> list[str]:
    """The sampled tokens' text. With ``--return-tokens-as-token-ids`` vLLM names each token
    ``token_id:<id>`` and puts its text in ``bytes``."""
    texts = []
    for entry in (choice.get("logprobs") or {}).get("content") or []:
        raw = entry.get("bytes")
        texts.append(bytes(raw).decode("utf-8", errors="replace") if raw is not None else str(entry.get("token", "")))
    return texts


class StreamAccumulator:
    """Rebuilds a chat completion (and its token ids and logprobs) from SSE bytes."""

    def __init__(self) -> None:
        self._buffer = b""
        self.prompt_ids: list[int] = []
        self.completion_ids: list[int] = []
        self.logps: list[float] = []
        self.token_texts: list[str] = []
        self.content: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None

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
            self.token_texts += _token_texts(choice)
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = self.tool_calls.setdefault(
                    call.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] = call.get("id") or slot["id"]
                function = call.get("function") or {}
                slot["function"]["name"] += function.get("name") or ""
                slot["function"]["arguments"] += function.get("arguments") or ""
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            self.stop_reason = choice.get("stop_reason", self.stop_reason)

    def response(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        if self.stop_reason is not None:
            choice["stop_reason"] = self.stop_reason
        return {
            "model": self.model,
            "choices": [choice],
            "usage": self.usage,
        }


class Proxy:
    """Relays chat completions for rollouts over one shared aiohttp connection pool."""

    def __init__(self, http: aiohttp.ClientSession | None, weight_version_ttl_s: float = 0.25) -> None:
        self.http = http
        self.weight_version_ttl_s = weight_version_ttl_s
        self._versions: dict[str, tuple[float, asyncio.Future]] = {}

    async def get_json(self, url: str, timeout_s: float) -> Any:
        """GET a JSON document upstream (raises on errors and non-200 answers)."""
        async with self.http.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            response.raise_for_status()
            return await response.json(loads=orjson.loads, content_type=None)

    def weight_version(self, base_url: str, not_before: float | None = None) -> asyncio.Future:
        """The inference server's weight version (vLLM dev mode; None if it has none).

        Read at most once per ``weight_version_ttl_s`` per upstream and shared by the calls in that
        window, so the lookup stays off the per-call cost; ``not_before`` (a ``time.monotonic()``
        value) asks for a read begun no earlier than that.
        """
        now = time.monotonic()
        cached = self._versions.get(base_url)
        if (
            cached is None
            or now - cached[0] > self.weight_version_ttl_s
            or (not_before is not None and cached[0] < not_before)
        ):
            cached = (now, asyncio.ensure_future(self._fetch_version(base_url)))
            self._versions[base_url] = cached
        return cached[1]

    async def version_of_call(self, base_url: str, before: asyncio.Future, ended: float) -> str | None:
        """The weights that sampled a call that ended at ``ended``: the version read before it, if the
        server still reports it after the call; None (unknown) when they differ. A call that waits in
        vLLM's queue while the weights are reloaded is sampled by the new ones although the version
        read before it names the old ones; the trainer drops a turn of unknown version rather than
        attribute its tokens to weights that may not have sampled them."""
        first = await before
        last = await self.weight_version(base_url, not_before=ended)
        return first if first == last else None

    async def _fetch_version(self, base_url: str) -> str | None:
        try:
            info = await self.get_json(f"{base_url}/weight_info", timeout_s=5.0)
            return str(info.get("weight_version"))
        except (*UPSTREAM_ERRORS, ValueError, AttributeError):
            return None

    def prepare(self, rollout: RolloutCalls, body: dict[str, Any], max_tokens: int) -> dict[str, Any]:
        """The upstream request: the agent's (its allow-listed fields when turns are recorded), with
        the rollout's model, sampling and ``max_tokens`` (what ``admit_call`` granted)."""
        forwarded = {k: v for k, v in body.items() if k in AGENT_FIELDS} if rollout.record_turns else dict(body)
        forwarded.update(rollout.sampling)
        forwarded["model"] = rollout.model
        if rollout.record_turns:
            forwarded["logprobs"] = True
            forwarded["return_token_ids"] = True
            if rollout.top_logprobs is not None:
                forwarded["top_logprobs"] = rollout.top_logprobs
        forwarded.pop("max_completion_tokens", None)
        forwarded["max_tokens"] = max_tokens
        if forwarded.get("stream"):
            forwarded["stream_options"] = {**(forwarded.get("stream_options") or {}), "include_usage": True}
        return forwarded

    async def relay(
        self,
        rollout: RolloutCalls,
        body: dict[str, Any],
        send: Send,
        reply_as: ReplyAs = None,
        error_as: ErrorAs = error,
    ) -> None:
        """Forward one chat-completions call for ``rollout``, send the reply back (unchanged, or
        rendered by ``reply_as`` in the agent's dialect from a non-streamed call), then record the
        turn; the call holds its share of the token budget until then. Errors go back as ``error_as``
        renders them."""
        max_tokens = rollout.admit_call(body.get("max_completion_tokens") or body.get("max_tokens"))
        try:
            await self._relay(rollout, body, send, max_tokens, reply_as, error_as)
        finally:
            rollout.release(max_tokens)

    async def _relay(
        self,
        rollout: RolloutCalls,
        body: dict[str, Any],
        send: Send,
        max_tokens: int,
        reply_as: ReplyAs,
        error_as: ErrorAs,
    ) -> None:
        forwarded = self.prepare(rollout, body, max_tokens)
        if reply_as is not None:  # the dialect's reply is rendered from the whole completion
            forwarded.pop("stream", None)
            forwarded.pop("stream_options", None)
        version = functools.partial(
            self.version_of_call, rollout.upstream_url, self.weight_version(rollout.upstream_url)
        )
        call = _Call(rollout, forwarded, version, bool(body.get("tools")), reply_as, error_as)
        url = f"{rollout.upstream_url}/v1/chat/completions"
        try:
            async with self.http.post(url, data=orjson.dumps(forwarded), headers=self._headers(rollout)) as upstream:
                if upstream.status >= 400:
                    await call.upstream_error(send, upstream.status, await upstream.read())
                elif forwarded.get("stream"):
                    await call.stream(send, upstream)
                else:
                    await call.unary(send, await upstream.read(), upstream.status)
        except UPSTREAM_ERRORS as exc:
            message = f"inference upstream {url}: {type(exc).__name__}: {exc}"
            rollout.infra_failure(message)
            if not call.started:
                await send_body(send, 502, error_as(502, message, "upstream_error"))
            else:  # the stream broke after its headers went out: end it
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    def _headers(rollout: RolloutCalls) -> dict[str, str]:
        if rollout.upstream_api_key is None:
            return JSON_HEADERS
        return {**JSON_HEADERS, "authorization": f"Bearer {rollout.upstream_api_key}"}

    async def count_tokens(self, rollout: RolloutCalls, body: dict[str, Any], timeout_s: float = 30.0) -> int:
        """The engine's prompt length of a chat request (its ``/tokenize``); no turn, no budget."""
        request = {"model": rollout.model, "messages": body["messages"], "add_generation_prompt": True}
        if body.get("tools"):
            request["tools"] = body["tools"]
        async with self.http.post(
            f"{rollout.upstream_url}/tokenize",
            data=orjson.dumps(request),
            headers=self._headers(rollout),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as upstream:
            upstream.raise_for_status()
            return int((await upstream.json(loads=orjson.loads, content_type=None))["count"])


class _Call:
    """One relayed call: records it as a turn and sends the reply (its end last)."""

    def __init__(
        self,
        rollout: RolloutCalls,
        forwarded: dict[str, Any],
        version: Callable[[float], Awaitable[str | None]],
        trainable: bool,
        reply_as: ReplyAs,
        error_as: ErrorAs,
    ) -> None:
        self.rollout, self.forwarded, self.version, self.trainable = rollout, forwarded, version, trainable
        self.reply_as, self.error_as = reply_as, error_as
        self.index = rollout.next_turn_index()
        self.began = time.monotonic()
        self.started = False  # response headers sent

    async def _record(self, stop_reason: str | int | None = None, **fields: Any) -> None:
        # vLLM names the stop string it matched in ``stop_reason`` (a token id for a stop token).
        stopped_at = stop_reason if isinstance(stop_reason, str) else None
        self.rollout.record(
            Turn(
                turn=self.index,
                request=self.forwarded,
                weight_version=await self.version(time.monotonic()),
                trainable=self.trainable and stopped_at is None,
                stopped_at=stopped_at,
                **fields,
            )
        )

    async def unary(self, send: Send, content: bytes, status: int) -> None:
        latency = time.monotonic() - self.began
        reply = orjson.loads(content)
        choice = (reply.get("choices") or [{}])[0]
        # Recorded before the reply goes out: a caller that has its reply finds the turn recorded.
        await self._record(
            response=reply,
            prompt_token_ids=reply.get("prompt_token_ids") or [],
            completion_token_ids=choice.get("token_ids") or [],
            per_token_logps=_logprobs(choice),
            completion_tokens=_token_texts(choice),
            finish_reason=choice.get("finish_reason"),
            stop_reason=choice.get("stop_reason"),
            latency_s=latency,
            stream=False,
        )
        self.started = True
        if self.reply_as is None:
            await send_body(send, status, content)
        else:
            rendered = self.reply_as(reply)
            await send_body(send, status, rendered.body, rendered.content_type)

    async def stream(self, send: Send, upstream: aiohttp.ClientResponse) -> None:
        content_type = upstream.headers.get("content-type", "text/event-stream").encode()
        self.started = True
        await send(
            {"type": "http.response.start", "status": upstream.status, "headers": [(b"content-type", content_type)]}
        )
        acc = StreamAccumulator()
        async for data in upstream.content.iter_any():
            acc.feed(data)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await self._record(  # before the stream ends (as in ``unary``)
            response=acc.response(),
            prompt_token_ids=acc.prompt_ids,
            completion_token_ids=acc.completion_ids,
            per_token_logps=acc.logps,
            completion_tokens=acc.token_texts,
            finish_reason=acc.finish_reason,
            stop_reason=acc.stop_reason,
            latency_s=time.monotonic() - self.began,
            stream=True,
        )
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def upstream_error(self, send: Send, status: int, content: bytes) -> None:
        text = content.decode(errors="replace")[:2000]
        await self._record(
            response={},
            prompt_token_ids=[],
            completion_token_ids=[],
            per_token_logps=[],
            finish_reason=None,
            latency_s=time.monotonic() - self.began,
            stream=bool(self.forwarded.get("stream")),
            upstream_status=status,
            upstream_error=text,
        )
        if status >= 500:
            self.rollout.infra_failure(f"inference upstream answered {status}: {text[:300]}")
        self.started = True
        await send_body(
            send, status, content if self.reply_as is None else self.error_as(status, text, "upstream_error")
        )


DIALECT = Dialect("chat_completions", to_chat, render, error, bearer_key)
