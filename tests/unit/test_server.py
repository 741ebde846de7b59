"""The server's HTTP and WebSocket protocol, in-process through Starlette's TestClient."""

import json
import time
from collections.abc import Iterator

import pytest
import reasoning_gym
from openenv.core.env_server.serialization import serialize_observation
from reasoning_gym_env import ReasoningGymObservation
from reasoning_gym_env_server import Settings, create_app
from reasoning_gym_env_server.protocol import observation_payload
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

CHAIN = {"dataset_name": "chain_sum", "seed": 4, "size": 10}
# Hostile resets, each failing fast in a worker: reasoning-gym raises IndexError generating the
# first question; a sieve that needs more than the worker's memory bound; a question over
# MAX_MESSAGE_BYTES (2048 here).
SPELL_ERROR = {
    "dataset_name": "spell_backward",
    "seed": 1,
    "size": 2,
    "dataset_config": {"min_word_len": 100, "max_word_len": 200},
}
MEMORY_HOG = {"dataset_name": "count_primes", "seed": 1, "size": 2, "dataset_config": {"max_n": 200_000_000}}
HUGE_QUESTION = {
    "dataset_name": "chain_sum",
    "seed": 1,
    "size": 2,
    "dataset_config": {"min_terms": 2000, "max_terms": 2000},
}
# Generating the first question takes longer than the 1 s deadline of the slow_client fixture.
SLOW = {"dataset_name": "acre", "seed": 1, "size": 1_000_000}


@pytest.fixture
def client() -> Iterator[TestClient]:
    settings = Settings(
        max_concurrent_envs=3, session_idle_timeout_s=60, max_message_bytes=2048, dataset_build_memory_mb=256
    )
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def slow_client() -> Iterator[TestClient]:
    settings = Settings(
        max_concurrent_envs=4,
        max_http_sessions=2,
        session_idle_timeout_s=60,
        dataset_build_timeout_s=1,
        dataset_build_memory_mb=256,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def ws_call(ws, frame: dict) -> dict:
    ws.send_text(json.dumps(frame))
    return ws.receive_json()


def test_health_reports_capacity(client: TestClient) -> None:
    assert client.get("/health").json()["active_sessions"] == 0
    with client.websocket_connect("/ws") as ws:
        ws_call(ws, {"type": "reset", "data": {}})
        health = client.get("/health").json()
        assert (health["status"], health["active_sessions"], health["max_sessions"]) == ("healthy", 1, 3)
        ws_call(ws, {"type": "step", "data": {"answer": "0"}})
        ws_call(ws, {"type": "reset", "data": {}})
        ws_call(ws, {"type": "step", "data": {"answer": "0"}})
    with client.websocket_connect("/ws") as ws:
        ws_call(ws, {"type": "reset", "data": {}})
    health = client.get("/health").json()
    # A replica's own totals: what a scaled-out deployment reads to see how work spread.
    assert (health["sessions_total"], health["episodes_total"], health["active_sessions"]) == (2, 2, 0)
    assert health["replica"]


def test_schema_metadata_and_datasets(client: TestClient) -> None:
    schema = client.get("/schema").json()
    assert set(schema) >= {"action", "observation", "state"}
    assert schema["action"]["required"] == ["answer"]
    assert client.get("/metadata").json()["name"] == "reasoning_gym"
    assert "chain_sum" in client.get("/datasets").json()["datasets"]


def test_websocket_episode_uses_openenv_frames(client: TestClient) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)
    with client.websocket_connect("/ws") as ws:
        reset = ws_call(ws, {"type": "reset", "data": CHAIN})
        assert reset["type"] == "observation"
        assert reset["data"]["observation"]["question"] == expected[0]["question"]
        assert (reset["data"]["reward"], reset["data"]["done"]) == (0.0, False)
        step = ws_call(ws, {"type": "step", "data": {"answer": expected[0]["answer"]}})
        assert (step["data"]["reward"], step["data"]["done"]) == (1.0, True)
        assert step["data"]["observation"]["correct_answer"] == expected[0]["answer"]
        state = ws_call(ws, {"type": "state"})
        assert state["type"] == "state"
        assert state["data"]["step_count"] == 1
        assert ws_call(ws, {"type": "reset", "data": {}})["data"]["observation"]["question"] == expected[1]["question"]


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("{not json", "INVALID_JSON"),
        ("[1, 2]", "INVALID_JSON"),
        (json.dumps({"type": "dance"}), "UNKNOWN_TYPE"),
        (json.dumps({"type": "step", "data": {"answr": "1"}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "step", "data": "1"}), "VALIDATION_ERROR"),
        (json.dumps({"type": "reset", "data": {"dataset_name": "nope", "seed": 1, "size": 1}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "reset", "data": {"dataset_name": "chain_sum"}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "reset", "data": [1]}), "VALIDATION_ERROR"),
        (json.dumps({"type": "reset", "data": {"pad": "x" * 4096}}), "MESSAGE_TOO_LARGE"),
    ],
)
def test_bad_frames_get_error_frames_and_the_session_survives(client: TestClient, raw: str, code: str) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)
    with client.websocket_connect("/ws") as ws:
        ws_call(ws, {"type": "reset", "data": CHAIN})
        ws.send_text(raw)
        error = ws.receive_json()
        assert error["type"] == "error"
        assert error["data"]["code"] == code
        assert error["data"]["message"]
        reply = ws_call(ws, {"type": "reset", "data": {}})
        assert reply["data"]["observation"]["question"] == expected[1]["question"]


def test_step_before_reset_is_an_error_frame(client: TestClient) -> None:
    with client.websocket_connect("/ws") as ws:
        error = ws_call(ws, {"type": "step", "data": {"answer": "1"}})
        assert error["data"]["code"] == "SESSION_ERROR"
        assert "before reset" in error["data"]["message"]


def test_bad_input_in_one_session_does_not_touch_another(client: TestClient) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)
    with client.websocket_connect("/ws") as good, client.websocket_connect("/ws") as bad:
        ws_call(good, {"type": "reset", "data": CHAIN})
        ws_call(bad, {"type": "reset", "data": {"dataset_name": "leg_counting", "seed": 1, "size": 3}})
        bad.send_text("garbage")
        bad.receive_json()
        ws_call(bad, {"type": "step", "data": {"wrong": 1}})
        step = ws_call(good, {"type": "step", "data": {"answer": expected[0]["answer"]}})
        assert step["data"]["reward"] == 1.0


def test_capacity_error_names_active_and_maximum_and_frees_on_close(client: TestClient) -> None:
    with (
        client.websocket_connect("/ws") as a,
        client.websocket_connect("/ws") as b,
        client.websocket_connect("/ws") as c,
    ):
        for ws in (a, b, c):
            ws_call(ws, {"type": "reset", "data": {}})
        with client.websocket_connect("/ws") as refused:
            error = refused.receive_json()
            assert error["data"]["code"] == "CAPACITY_REACHED"
            assert (error["data"]["active_sessions"], error["data"]["max_sessions"]) == (3, 3)
            assert "3/3" in error["data"]["message"]
            with pytest.raises(WebSocketDisconnect) as closed:
                refused.receive_text()
            assert closed.value.code == 1013
        c.send_text(json.dumps({"type": "close"}))
    with client.websocket_connect("/ws") as again:
        assert ws_call(again, {"type": "reset", "data": {}})["type"] == "observation"


def test_idle_sessions_are_reaped() -> None:
    with TestClient(create_app(Settings(max_concurrent_envs=1, session_idle_timeout_s=0.3))) as client:
        with client.websocket_connect("/ws") as ws:
            ws_call(ws, {"type": "reset", "data": {}})
            expired = ws.receive_json()  # pushed by the reaper, unasked
            assert expired["data"]["code"] == "SESSION_EXPIRED"
            with pytest.raises(WebSocketDisconnect):
                ws.receive_text()
        http_session = client.post("/reset", json={"open_session": True}).json()["session_id"]
        deadline = time.monotonic() + 5
        while client.get("/health").json()["active_sessions"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/health").json()["active_sessions"] == 0
        assert client.get("/health").json()["reaped_sessions"] == 2
        assert client.post("/step", json={"session_id": http_session, "action": {"answer": "1"}}).status_code == 404


def test_http_episode_with_session_id(client: TestClient) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)
    reset = client.post("/reset", json={**CHAIN, "open_session": True}).json()
    assert reset["observation"]["question"] == expected[0]["question"]
    sid = reset["session_id"]
    step = client.post("/step", json={"session_id": sid, "action": {"answer": expected[0]["answer"]}}).json()
    assert (step["reward"], step["done"], step["observation"]["score"]) == (1.0, True, 1.0)
    assert client.get("/state", params={"session_id": sid}).json()["step_count"] == 1
    nxt = client.post("/reset", json={"session_id": sid}).json()
    assert nxt["observation"]["question"] == expected[1]["question"]
    assert nxt["session_id"] == sid
    assert client.delete(f"/sessions/{sid}").status_code == 204
    assert client.get("/health").json()["active_sessions"] == 0


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("post", "/step", {"action": {"answer": "1"}}, 409, "SESSION_ERROR"),
        ("post", "/step", {"session_id": "nope", "action": {"answer": "1"}}, 404, "SESSION_ERROR"),
        ("post", "/reset", {"dataset_name": "nope", "seed": 1, "size": 1}, 400, "VALIDATION_ERROR"),
        ("post", "/reset", {"session_id": "nope"}, 404, "SESSION_ERROR"),
        ("post", "/reset", "{broken", 400, "INVALID_JSON"),
        ("post", "/reset", {"pad": "x" * 4096}, 413, "MESSAGE_TOO_LARGE"),
        ("post", "/reset", {"open_session": "yes"}, 422, "VALIDATION_ERROR"),
        ("post", "/reset", {"self": 1}, 422, "VALIDATION_ERROR"),
        ("post", "/step", {"session_id": "x", "action": {"answer": "1"}, "self": 1}, 422, "VALIDATION_ERROR"),
        ("post", "/reset", {**SPELL_ERROR, "open_session": True}, 422, "DATASET_ERROR"),
        ("post", "/reset", {**MEMORY_HOG, "open_session": True}, 422, "DATASET_TOO_COSTLY"),
        ("post", "/reset", {**HUGE_QUESTION, "open_session": True}, 422, "DATASET_TOO_COSTLY"),
        ("get", "/state?session_id=nope", None, 404, "SESSION_ERROR"),
        ("delete", "/sessions/nope", None, 404, "SESSION_ERROR"),
    ],
)
def test_http_bad_requests_get_4xx_with_a_message(client, method, path, body, status, code) -> None:
    kwargs = {"content": body} if isinstance(body, str) else ({"json": body} if body is not None else {})
    response = client.request(method.upper(), path, **kwargs)
    assert response.status_code == status
    assert response.json()["detail"]["code"] == code
    assert response.json()["detail"]["message"]
    assert client.get("/health").json()["active_sessions"] == 0  # failed resets leave no slot taken


def test_http_invalid_action_is_422(client: TestClient) -> None:
    sid = client.post("/reset", json={"open_session": True}).json()["session_id"]
    response = client.post("/step", json={"session_id": sid, "action": {"answr": "1"}})
    assert response.status_code == 422
    assert response.json()["detail"]["errors"]


def test_http_capacity_is_503(client: TestClient) -> None:
    for _ in range(3):
        client.post("/reset", json={"open_session": True})
    response = client.post("/reset", json={"open_session": True})
    assert response.status_code == 503
    assert response.json()["detail"]["active_sessions"] == 3
    assert response.json()["detail"]["max_sessions"] == 3


def test_stateless_http_reset_holds_no_slot(client: TestClient) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)
    for _ in range(10):  # more than the 3 slots
        reply = client.post("/reset", json=CHAIN)
        assert reply.status_code == 200
        assert "session_id" not in reply.json()
        assert reply.json()["observation"]["question"] == expected[0]["question"]
    assert client.get("/health").json()["active_sessions"] == 0


def test_failed_http_resets_free_their_slots_and_keep_a_sessions_dataset(client: TestClient) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)
    sid = client.post("/reset", json={**CHAIN, "open_session": True}).json()["session_id"]
    for bad in [SPELL_ERROR, MEMORY_HOG, HUGE_QUESTION, {"dataset_name": "nope", "seed": 1, "size": 1}] * 5:
        for body in (bad, {**bad, "open_session": True}, {**bad, "session_id": sid}):
            reply = client.post("/reset", json=body)
            assert 400 <= reply.status_code < 500, reply.text
            assert reply.json()["detail"]["message"], reply.text
    assert client.get("/health").json()["active_sessions"] == 1
    nxt = client.post("/reset", json={"session_id": sid}).json()
    assert nxt["observation"]["question"] == expected[1]["question"]


def test_failed_websocket_reset_keeps_the_dataset_and_the_open_question(client: TestClient) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)
    with client.websocket_connect("/ws") as ws:
        ws_call(ws, {"type": "reset", "data": CHAIN})
        for bad in (SPELL_ERROR, MEMORY_HOG, HUGE_QUESTION):
            error = ws_call(ws, {"type": "reset", "data": bad})
            assert error["type"] == "error"
            assert error["data"]["code"] in ("DATASET_ERROR", "DATASET_TOO_COSTLY")
        step = ws_call(ws, {"type": "step", "data": {"answer": expected[0]["answer"]}})
        assert step["data"]["reward"] == 1.0  # still question 0
        assert ws_call(ws, {"type": "reset", "data": {}})["data"]["observation"]["question"] == expected[1]["question"]


def test_slow_reset_times_out_while_other_sessions_are_served(slow_client: TestClient) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=10)
    with slow_client.websocket_connect("/ws") as good, slow_client.websocket_connect("/ws") as slow:
        ws_call(good, {"type": "reset", "data": CHAIN})
        slow.send_text(json.dumps({"type": "reset", "data": SLOW}))
        # Served while the slow build runs in its worker (the other worker is free).
        for i in range(1, 6):
            assert (
                ws_call(good, {"type": "reset", "data": {}})["data"]["observation"]["question"]
                == expected[i]["question"]
            )
            assert ws_call(good, {"type": "step", "data": {"answer": expected[i]["answer"]}})["data"]["reward"] == 1.0
        error = slow.receive_json()
        assert error["data"]["code"] == "DATASET_TOO_COSTLY"
        assert "DATASET_BUILD_TIMEOUT_S=1s" in error["data"]["message"]
        assert ws_call(slow, {"type": "reset", "data": CHAIN})["type"] == "observation"
    health = slow_client.get("/health").json()
    assert health["dataset_worker_restarts"] == 1
    assert health["active_sessions"] == 0


def test_http_sessions_have_their_own_cap(slow_client: TestClient) -> None:
    for _ in range(2):
        assert slow_client.post("/reset", json={"open_session": True}).status_code == 200
    refused = slow_client.post("/reset", json={"open_session": True})
    assert refused.status_code == 503
    assert "MAX_HTTP_SESSIONS" in refused.json()["detail"]["message"]
    with slow_client.websocket_connect("/ws") as ws:  # WebSocket slots are still free
        assert ws_call(ws, {"type": "reset", "data": {}})["type"] == "observation"
    assert slow_client.post("/reset", json={}).status_code == 200  # and stateless resets need none


@pytest.mark.parametrize(
    "fields",
    [
        {"question": "q?", "reward": 0.0, "done": False},
        {
            "score": 0.5,
            "correct_answer": "4",
            "dataset_metadata": {"a": [1, 2]},
            "reward": 0.5,
            "done": True,
            "metadata": {"scoring_error": "too slow"},
        },
    ],
)
def test_replies_are_written_as_openenvs_serializer_writes_them(fields: dict) -> None:
    observation = ReasoningGymObservation(**fields)
    assert json.dumps(observation_payload(observation)) == json.dumps(serialize_observation(observation))
