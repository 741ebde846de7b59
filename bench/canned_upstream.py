"""A fast OpenAI-compatible stand-in for vLLM (bench only): fixed token ids and logprobs.

Serves POST /v1/chat/completions (unary and SSE) and GET /weight_info, so that a benchmark
measures the proxy's own cost rather than a model's.
"""

import orjson

PROMPT_IDS = list(range(1, 201))
COMPLETION_IDS = list(range(1000, 1016))
LOGPROBS = [{"token": f"token_id:{i}", "logprob": -0.5, "bytes": [120]} for i in COMPLETION_IDS]
UNARY = orjson.dumps(
    {
        "id": "chatcmpl-canned",
        "object": "chat.completion",
        "model": "canned",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "x" * 16},
                "finish_reason": "length",
                "logprobs": {"content": LOGPROBS},
                "token_ids": COMPLETION_IDS,
            }
        ],
        "usage": {"prompt_tokens": 200, "completion_tokens": 16, "total_tokens": 216},
        "prompt_token_ids": PROMPT_IDS,
    }
)
CHUNKS = [
    b"data: "
    + orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "canned",
            "prompt_token_ids": PROMPT_IDS,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        }
    )
    + b"\n\n"
]
CHUNKS += [
    b"data: "
    + orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "canned",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "x"},
                    "token_ids": [i],
                    "logprobs": {"content": [LOGPROBS[n]]},
                    "finish_reason": "length" if n == 15 else None,
                }
            ],
        }
    )
    + b"\n\n"
    for n, i in enumerate(COMPLETION_IDS)
]
CHUNKS += [
    b"data: "
    + orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "canned",
            "choices": [],
            "usage": {"prompt_tokens": 200, "completion_tokens": 16},
        }
    )
    + b"\n\n",
    b"data: [DONE]\n\n",
]
STREAM = b"".join(CHUNKS)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/weight_info":
        payload, content_type = b'{"weight_version": "canned"}', b"application/json"
    elif orjson.loads(body or b"{}").get("stream"):
        payload, content_type = STREAM, b"text/event-stream"
    else:
        payload, content_type = UNARY, b"application/json"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": payload})
