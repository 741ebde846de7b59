"""Fuzzing the reasoning-gym server: no input to any endpoint answers 500 or drops a session.

Every HTTP endpoint and the ``/ws`` frames get malformed JSON, wrong types, keys that collide with
Python or pydantic names, unknown keys, huge and deeply nested values, and seeded random mutations
of valid requests. Each must get a 4xx with a message (HTTP) or an error frame with a message
(``/ws``), while a WebSocket session and an HTTP session opened before the fuzzing keep their
datasets, positions and scores, checked between batches.
"""

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
import reasoning_gym
from reasoning_gym_env_server import Settings, create_app
from starlette.testclient import TestClient

MAX_MESSAGE_BYTES = 64 * 1024
CHAIN = {"dataset_name": "chain_sum", "seed": 4, "size": 10}
EXPECTED = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)

# Names that meet Python parameters, pydantic internals or our own HTTP fields.
COLLIDING = [
    "self",
    "cls",
    "arguments",
    "kwargs",
    "request",
    "env",
    "session",
    "model_config",
    "model_fields",
    "__class__",
    "__init__",
    "__dict__",
    "type",
    "data",
    "action",
    "answer",
    "metadata",
    "state",
]
WRONG_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    1.5,
    "",
    "x",
    "é" * 50,
    [],
    [1],
    {},
    {"a": 1},
    [[[[[[[[[[[[1]]]]]]]]]]]],
    "x" * 60_000,
    list(range(6000)),
    {str(i): i for i in range(3000)},
]
DEEP = "[" * 100_000 + "]" * 100_000
RAW_BODIES = [
    "{",
    "[]",
    "null",
    "1",
    '"x"',
    '{"a":',
    "\xff",
    DEEP,
    '{"seed": NaN}',
    '{"seed": 1' + "0" * 400 + "}",
    '{"a": 1, "a": 2}',
    "{" * 5000,
]
RESET_FIELDS = ["dataset_name", "dataset_config", "dataset_specs", "seed", "size", "episode_id"]


def bad_reset_arguments() -> Iterator[dict[str, Any]]:
    """Reset arguments each of which must be refused."""
    for key in COLLIDING:
        yield {key: 1}
        yield {**CHAIN, key: "x"}
    for field in RESET_FIELDS:
        for value in WRONG_VALUES:
            arguments = {**CHAIN, field: value}
            if field == "dataset_name" and isinstance(value, str) and value not in reasoning_gym.factory.DATASETS:
                yield arguments  # an unknown name
            elif field in ("seed", "size") and isinstance(value, int) and not isinstance(value, bool):
                if value < 0 or value > 2**53:
                    yield arguments  # out of bounds
            elif field == "episode_id" and isinstance(value, str):
                if len(value) > 255:
                    yield arguments
            elif field == "dataset_config" and isinstance(value, dict):
                if value:
                    yield arguments  # keys chain_sum rejects, or too many values
            elif field == "dataset_specs":
                if value is not None:
                    yield arguments  # specs without 'composite'
            elif value is not None:
                yield arguments  # a wrong type
    yield {"dataset_config": {"a": 1}}  # config without a name
    yield {**CHAIN, "dataset_name": "composite", "dataset_specs": [{"name": "chain_sum"}], "dataset_config": {"a": 1}}
    yield {**CHAIN, "dataset_config": {"a": json.loads("[" * 500 + "]" * 500)}}  # deep


def bad_actions() -> Iterator[Any]:
    """Step payloads (the action) each of which must be refused."""
    yield None
    yield {}
    for value in WRONG_VALUES:
        if not isinstance(value, str):
            yield {"answer": value}
            yield value
    for key in COLLIDING:
        if key != "answer" and key != "metadata":
            yield {"answer": "1", key: 1}
    yield {"answer": "1", "metadata": "not an object"}


def mutations(valid: dict[str, Any], rng: random.Random, count: int) -> Iterator[dict[str, Any]]:
    """Seeded random edits of a valid body: a value swapped, a key added or removed, nesting added."""
    keys = list(valid) + COLLIDING
    for _ in range(count):
        body = json.loads(json.dumps(valid))
        for _ in range(rng.randint(1, 3)):
            edit = rng.random()
            if edit < 0.5:
                body[rng.choice(keys)] = rng.choice(WRONG_VALUES[:14])
            elif edit < 0.7 and body:
                body.pop(rng.choice(list(body)))
            else:
                body = {rng.choice(keys): body}
        yield body


class Bystanders:
    """A WebSocket session and an HTTP session that must come through the fuzzing untouched."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.ws_cm = client.websocket_connect("/ws")
        self.ws = self.ws_cm.__enter__()
        self.ws_index = self.http_index = 0
        assert self._ws({"type": "reset", "data": CHAIN})["data"]["observation"]["question"] == EXPECTED[0]["question"]
        reply = client.post("/reset", json={**CHAIN, "open_session": True}).json()
        assert reply["observation"]["question"] == EXPECTED[0]["question"]
        self.session_id = reply["session_id"]

    def _ws(self, frame: dict[str, Any]) -> dict[str, Any]:
        self.ws.send_text(json.dumps(frame))
        return self.ws.receive_json()

    def check(self) -> None:
        """Each session scores its open question right and moves on to the expected next one."""
        answer = EXPECTED[self.ws_index]["answer"]
        assert self._ws({"type": "step", "data": {"answer": answer}})["data"]["reward"] == 1.0
        self.ws_index += 1
        reply = self._ws({"type": "reset", "data": {}})
        assert reply["data"]["observation"]["question"] == EXPECTED[self.ws_index % 10]["question"]
        answer = EXPECTED[self.http_index]["answer"]
        step = self.client.post("/step", json={"session_id": self.session_id, "action": {"answer": answer}})
        assert step.status_code == 200
        assert step.json()["reward"] == 1.0
        self.http_index += 1
        reply = self.client.post("/reset", json={"session_id": self.session_id}).json()
        assert reply["observation"]["question"] == EXPECTED[self.http_index % 10]["question"]

    def close(self) -> None:
        self.ws_cm.__exit__(None, None, None)


@pytest.fixture
def client() -> Iterator[TestClient]:
    settings = Settings(
        max_concurrent_envs=8,
        max_http_sessions=4,
        session_idle_timeout_s=300,
        max_message_bytes=MAX_MESSAGE_BYTES,
        max_dataset_size=10_000,
    )
    # raise_server_exceptions: an unhandled error in the app fails the test instead of becoming a 500
    with TestClient(create_app(settings), raise_server_exceptions=True) as c:
        yield c


@pytest.fixture
def bystanders(client: TestClient) -> Iterator[Bystanders]:
    watched = Bystanders(client)
    try:
        yield watched
        watched.check()
        assert client.get("/health").json()["active_sessions"] == 2  # the fuzzing left no slot taken
    finally:
        watched.close()  # an open WebSocket would hold the test client's shutdown forever


def assert_refused(response: Any, what: Any) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, str(what)[:200], response.text[:300])
    detail = response.json()["detail"]  # ours: {"message", "code"}; the router's own 404/405: a string
    assert detail["message"] if isinstance(detail, dict) else detail, response.text[:300]


def assert_answered(response: Any, what: Any) -> None:
    """A random mutation may be valid by chance: 2xx then, else a 4xx with a message."""
    if response.status_code >= 300:
        assert_refused(response, what)


def test_http_endpoints_refuse_every_bad_body(client: TestClient, bystanders: Bystanders) -> None:
    sid = client.post("/reset", json={"open_session": True}).json()["session_id"]
    cases: list[tuple[str, Any]] = [("/reset", raw) for raw in RAW_BODIES] + [
        ("/step", raw) for raw in ["", *RAW_BODIES]
    ]
    cases += [("/reset", body) for body in bad_reset_arguments()]
    cases += [("/reset", {"session_id": value}) for value in WRONG_VALUES if value is not None]
    cases += [("/reset", {"open_session": value}) for value in WRONG_VALUES if not isinstance(value, bool)]
    cases += [("/step", {"session_id": sid, "action": action}) for action in bad_actions()]
    cases += [("/step", {"session_id": value, "action": {"answer": "1"}}) for value in WRONG_VALUES]
    cases += [("/step", {"session_id": sid, "action": {"answer": "1"}, key: 1}) for key in COLLIDING if key != "action"]
    for i, (path, body) in enumerate(cases):
        content = body if isinstance(body, str) else json.dumps(body)
        assert_refused(client.post(path, content=content, headers={"content-type": "application/json"}), (path, body))
        if i % 50 == 0:
            bystanders.check()
    for weird in ["nope", "x" * 5000, "%00", "..", "é", "%ff"]:
        assert_refused(client.get(f"/state?session_id={weird}"), weird)
        assert_refused(client.delete(f"/sessions/{weird}"), weird)
    client.delete(f"/sessions/{sid}")


def test_http_random_mutations_never_answer_500(client: TestClient, bystanders: Bystanders) -> None:
    rng = random.Random(7)
    sid = client.post("/reset", json={"open_session": True}).json()["session_id"]
    for i, body in enumerate(mutations({**CHAIN, "episode_id": "e"}, rng, 300)):
        body.pop("open_session", None)  # valid mutations must not pile up sessions
        assert_answered(client.post("/reset", json=body), body)
        step = {"session_id": sid, "action": {"answer": "1"}}
        assert_answered(client.post("/step", json=next(mutations(step, rng, 1))), step)
        if i % 50 == 0:
            bystanders.check()
    client.delete(f"/sessions/{sid}")


def test_websocket_refuses_every_bad_frame_with_an_error_frame(client: TestClient, bystanders: Bystanders) -> None:
    frames: list[Any] = list(RAW_BODIES)
    frames += [{"type": value} for value in WRONG_VALUES]
    frames += [
        {},
        {"data": {}},
        {"type": "reset", "data": {}, "extra": 1},
        {"type": "state", "data": {}},
        {"type": "close", "data": 1},
        {"type": "mcp", "data": {}},
    ]
    frames += [{"type": "reset", "data": value} for value in WRONG_VALUES if value is not None and value != {}]
    frames += [{"type": "reset", "data": arguments} for arguments in bad_reset_arguments()]
    frames += [{"type": "step", "data": action} for action in bad_actions()]
    frames += [{"type": "step", "data": {"answer": "1"}, key: 1} for key in COLLIDING if key not in ("type", "data")]
    with client.websocket_connect("/ws") as ws:
        for i, frame in enumerate(frames):
            ws.send_text(frame if isinstance(frame, str) else json.dumps(frame))
            reply = ws.receive_json()
            assert reply["type"] == "error", (str(frame)[:200], reply)
            assert reply["data"]["message"], (str(frame)[:200], reply)
            if i % 50 == 0:
                bystanders.check()
        ws.send_bytes(b"\xff\xfe")
        assert ws.receive_json()["type"] == "error"
        ws.send_text(json.dumps({"type": "reset", "data": CHAIN}))  # the fuzzed session itself still works
        assert ws.receive_json()["data"]["observation"]["question"] == EXPECTED[0]["question"]


def test_websocket_random_mutations_never_break_a_session(client: TestClient, bystanders: Bystanders) -> None:
    rng = random.Random(11)
    with client.websocket_connect("/ws") as ws:
        for i in range(300):
            valid = rng.choice(
                [
                    {"type": "reset", "data": CHAIN},
                    {"type": "step", "data": {"answer": "1"}},
                    {"type": "state"},
                    {"type": "reset", "data": {"episode_id": "e"}},
                ]
            )
            frame = next(mutations(valid, rng, 1))
            if frame.get("type") == "close":
                continue
            ws.send_text(json.dumps(frame))
            reply = ws.receive_json()
            assert reply["type"] in ("observation", "state") or reply["data"]["message"], (frame, reply)
            if i % 50 == 0:
                bystanders.check()
