"""The reasoning-gym env image: full episodes over WebSocket and HTTP, concurrency, errors, reaping."""

import json
import threading
import time
from typing import Callable

import httpx
import pytest
import reasoning_gym
from openenv.core.generic_client import GenericEnvClient
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/ws"


@pytest.mark.parametrize(
    ("name", "config"),
    [("chain_sum", {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}),
     ("leg_counting", {}), ("basic_arithmetic", {})],
)
def test_client_episodes_score_like_reasoning_gym(env_url: str, name: str, config: dict) -> None:
    expected = reasoning_gym.create_dataset(name, seed=123, size=8, **config)
    with ReasoningGymEnv(base_url=env_url).sync() as env:
        for i in range(8):
            kwargs = {"dataset_name": name, "dataset_config": config, "seed": 123, "size": 8} if i == 0 else {}
            question = env.reset(**kwargs).observation.question
            assert question == expected[i]["question"]
            answer = expected[i]["answer"] if i % 2 == 0 else "a wrong answer"
            result = env.step(ReasoningGymAction(answer=answer))
            assert result.done is True
            assert result.reward == result.observation.score == expected.score_answer(answer, expected[i])
            assert result.observation.correct_answer == expected[i]["answer"]


def test_composite_dataset(env_url: str) -> None:
    specs = [{"name": "chain_sum", "weight": 1, "config": {}}, {"name": "leg_counting", "weight": 3, "config": {}}]
    expected = reasoning_gym.create_dataset(
        "composite", seed=5, size=10, datasets=[reasoning_gym.composite.DatasetSpec(**s) for s in specs]
    )
    with ReasoningGymEnv(base_url=env_url).sync() as env:
        seen = set()
        for i in range(10):
            obs = env.reset(**({"dataset_name": "composite", "dataset_specs": specs, "seed": 5, "size": 10} if i == 0 else {}))
            assert obs.observation.question == expected[i]["question"]
            result = env.step(ReasoningGymAction(answer=expected[i]["answer"]))
            assert result.reward == 1.0
            seen.add(result.observation.dataset_metadata["source_dataset"])
        assert seen == {"chain_sum", "leg_counting"}


def test_upstream_generic_client_and_default_dataset(env_url: str) -> None:
    expected = reasoning_gym.create_dataset("leg_counting", seed=42, size=1000)
    with GenericEnvClient(base_url=env_url).sync() as env:
        assert env.reset().observation["question"] == expected[0]["question"]
        result = env.step({"answer": expected[0]["answer"]})
        assert result.reward == 1.0 and result.done


def test_http_episode(env_url: str) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=8, size=3)
    with httpx.Client(base_url=env_url, timeout=10) as http:
        reset = http.post("/reset", json={"dataset_name": "chain_sum", "seed": 8, "size": 3}).json()
        assert reset["observation"]["question"] == expected[0]["question"]
        step = http.post("/step", json={"session_id": reset["session_id"], "action": {"answer": expected[0]["answer"]}})
        assert step.status_code == 200 and step.json()["reward"] == 1.0
        assert http.delete(f"/sessions/{reset['session_id']}").status_code == 204
        assert http.get("/schema").json()["action"]["required"] == ["answer"]


def test_32_concurrent_sessions_do_not_interfere(env_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(32)

    def run(seed: int) -> None:
        try:
            expected = reasoning_gym.create_dataset("chain_sum", seed=seed, size=20)
            with ReasoningGymEnv(base_url=env_url).sync() as env:
                barrier.wait(timeout=60)
                for i in range(20):
                    obs = env.reset(**({"dataset_name": "chain_sum", "seed": seed, "size": 20} if i == 0 else {}))
                    assert obs.observation.question == expected[i]["question"]
                    answer = expected[i]["answer"] if (i + seed) % 3 else "0"
                    result = env.step(ReasoningGymAction(answer=answer))
                    assert result.reward == expected.score_answer(answer, expected[i])
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(1000 + i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors[:3]


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{oops", "INVALID_JSON"),
        (json.dumps({"type": "teleport"}), "UNKNOWN_TYPE"),
        (json.dumps({"type": "step", "data": {"answer": "1"}}), "SESSION_ERROR"),
        (json.dumps({"type": "reset", "data": {"dataset_name": "no_such", "seed": 1, "size": 2}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "reset", "data": {"dataset_name": "chain_sum", "seed": 1, "size": 2,
                                               "dataset_config": {"min_terms": "many"}}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "reset", "data": {"dataset_name": "chain_sum"}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "reset", "data": {"x": "y" * (1 << 20)}}), "MESSAGE_TOO_LARGE"),
    ],
)
def test_bad_input_gets_an_error_frame_and_the_session_continues(env_url: str, frame: str, code: str) -> None:
    with connect(ws_url(env_url), max_size=None) as ws:
        ws.send(frame)
        error = json.loads(ws.recv(timeout=10))
        assert error["type"] == "error" and error["data"]["code"] == code, error
        ws.send(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"


def test_client_raises_with_the_servers_message(env_url: str) -> None:
    with ReasoningGymEnv(base_url=env_url).sync() as env:
        with pytest.raises(RuntimeError, match="Unknown dataset 'nope'"):
            env.reset(dataset_name="nope", seed=1, size=1)
        with pytest.raises(RuntimeError, match="needs both 'seed' and 'size'"):
            env.reset(dataset_name="chain_sum")


def test_capacity_and_reaping_of_abandoned_sessions(start_env: Callable[..., str]) -> None:
    url = start_env(MAX_CONCURRENT_ENVS="2", SESSION_IDLE_TIMEOUT_S="2")
    abandoned = [connect(ws_url(url)) for _ in range(2)]  # never closed by us, never used again
    for ws in abandoned:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        ws.recv(timeout=10)
    health = httpx.get(f"{url}/health").json()
    assert (health["active_sessions"], health["max_sessions"]) == (2, 2)

    with connect(ws_url(url)) as refused:
        error = json.loads(refused.recv(timeout=10))
        assert error["data"]["code"] == "CAPACITY_REACHED" and "2/2" in error["data"]["message"]

    deadline = time.monotonic() + 15
    while httpx.get(f"{url}/health").json()["active_sessions"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert httpx.get(f"{url}/health").json()["active_sessions"] == 0
    for ws in abandoned:
        assert json.loads(ws.recv(timeout=5))["data"]["code"] == "SESSION_EXPIRED"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
    with ReasoningGymEnv(base_url=url).sync() as env:
        assert env.reset().observation.question


def test_upstream_from_docker_image_runs_our_image(env_image: str) -> None:
    expected = reasoning_gym.create_dataset("leg_counting", seed=42, size=10)
    env = ReasoningGymEnv.from_docker_image(env_image).sync()
    try:
        result = env.reset(dataset_name="leg_counting", seed=42, size=10)
        assert result.observation.question == expected[0]["question"]
        assert env.step(ReasoningGymAction(answer=expected[0]["answer"])).reward == 1.0
    finally:
        env.close()
