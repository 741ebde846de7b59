"""The reasoning-gym env image: full episodes over WebSocket and HTTP, concurrency, errors, reaping,
and hostile input (costly configs, failing builds, unscorable answers, floods of bad requests)."""

import json
import socket
import threading
import time
from collections.abc import Callable

import httpx
import pytest
import reasoning_gym
from openenv.core.generic_client import GenericEnvClient
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import docker


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/ws"


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("chain_sum", {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}),
        ("leg_counting", {}),
        ("basic_arithmetic", {}),
    ],
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
            obs = env.reset(
                **({"dataset_name": "composite", "dataset_specs": specs, "seed": 5, "size": 10} if i == 0 else {})
            )
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
        assert result.reward == 1.0
        assert result.done


def test_http_episode(env_url: str) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=8, size=3)
    with httpx.Client(base_url=env_url, timeout=10) as http:
        reset = http.post(
            "/reset", json={"dataset_name": "chain_sum", "seed": 8, "size": 3, "open_session": True}
        ).json()
        assert reset["observation"]["question"] == expected[0]["question"]
        step = http.post("/step", json={"session_id": reset["session_id"], "action": {"answer": expected[0]["answer"]}})
        assert step.status_code == 200
        assert step.json()["reward"] == 1.0
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
        (
            json.dumps(
                {
                    "type": "reset",
                    "data": {
                        "dataset_name": "chain_sum",
                        "seed": 1,
                        "size": 2,
                        "dataset_config": {"min_terms": "many"},
                    },
                }
            ),
            "VALIDATION_ERROR",
        ),
        (json.dumps({"type": "reset", "data": {"dataset_name": "chain_sum"}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "reset", "data": {"x": "y" * (1 << 20)}}), "MESSAGE_TOO_LARGE"),
    ],
)
def test_bad_input_gets_an_error_frame_and_the_session_continues(env_url: str, frame: str, code: str) -> None:
    with connect(ws_url(env_url), max_size=None) as ws:
        ws.send(frame)
        error = json.loads(ws.recv(timeout=10))
        assert error["type"] == "error", error
        assert error["data"]["code"] == code, error
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
        assert error["data"]["code"] == "CAPACITY_REACHED"
        assert "2/2" in error["data"]["message"]

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


# Hostile resets (each one fails in a worker): reasoning-gym raises IndexError generating the first
# question; a sieve far over the worker's memory bound; a question over MAX_MESSAGE_BYTES; a build
# that takes minutes (acre generates every sample up front).
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
    "dataset_config": {"min_terms": 300_000, "max_terms": 300_000},
}
SLOW_BUILD = {"dataset_name": "acre", "seed": 1, "size": 1_000_000}
DEADLINE_S = 3


def container_logs(url: str) -> str:
    """Logs of the env container published at ``url``."""
    port = url.rsplit(":", 1)[1]
    for container in docker.from_env().containers.list():
        bindings = [b for binds in container.attrs["NetworkSettings"]["Ports"].values() if binds for b in binds]
        if any(b["HostPort"] == port for b in bindings):
            return container.logs().decode()
    raise LookupError(f"no container publishes port {port}")


@pytest.fixture
def hostile_env(start_env: Callable[..., str]) -> str:
    """A fresh env container with a short worker deadline (its own: an attack may wedge an unfixed server)."""
    return start_env(DATASET_BUILD_TIMEOUT_S=str(DEADLINE_S), LOG_LINES_PER_MINUTE="5")


def test_flood_of_bad_http_resets_fails_cleanly_and_keeps_sessions(hostile_env: str) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=3, size=10)
    with connect(ws_url(hostile_env)) as ws, httpx.Client(base_url=hostile_env, timeout=30) as http:
        ws.send(json.dumps({"type": "reset", "data": {"dataset_name": "chain_sum", "seed": 3, "size": 10}}))
        assert json.loads(ws.recv(timeout=10))["data"]["observation"]["question"] == expected[0]["question"]
        active = http.get("/health").json()["active_sessions"]
        log_lines = len(container_logs(hostile_env).splitlines())
        bad = [
            SPELL_ERROR,
            HUGE_QUESTION,
            {"dataset_name": "nope", "seed": 1, "size": 1},
            {"dataset_name": "chain_sum", "seed": 1, "size": 10**12},
        ]
        for i in range(100):
            body = bad[i % len(bad)] if i % 5 else {**bad[i % len(bad)], "open_session": True}
            reply = http.post("/reset", json=body)
            assert 400 <= reply.status_code < 500, (i, reply.status_code, reply.text[:300])
            assert reply.json()["detail"]["message"], (i, reply.status_code, reply.text[:300])
        for _ in range(20):  # valid stateless resets hold no slot either
            assert (
                "session_id"
                not in http.post("/reset", json={"dataset_name": "leg_counting", "seed": 1, "size": 5}).json()
            )
        host, port = hostile_env.removeprefix("http://").rsplit(":", 1)
        for _ in range(30):  # malformed HTTP: uvicorn logs each one, within the same allowance
            with socket.create_connection((host, int(port)), timeout=10) as raw:
                raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                raw.recv(1024)
        memory = http.post("/reset", json=MEMORY_HOG)
        assert memory.status_code == 422, memory.text[:300]
        assert memory.json()["detail"]["code"] == "DATASET_TOO_COSTLY", memory.text[:300]
        assert http.get("/health").json()["active_sessions"] == active
        # The open episode is intact: its question is still the one to score, then the next one follows.
        ws.send(json.dumps({"type": "step", "data": {"answer": expected[0]["answer"]}}))
        assert json.loads(ws.recv(timeout=10))["data"]["reward"] == 1.0
        ws.send(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(ws.recv(timeout=10))["data"]["observation"]["question"] == expected[1]["question"]
    # LOG_LINES_PER_MINUTE=5: the flood leaves a handful of lines, not one (or a traceback) per request.
    assert len(container_logs(hostile_env).splitlines()) - log_lines <= 10


def test_costly_reset_gets_a_4xx_within_the_deadline_while_others_are_served(hostile_env: str) -> None:
    expected = reasoning_gym.create_dataset("chain_sum", seed=4, size=20)
    with connect(ws_url(hostile_env)) as good, connect(ws_url(hostile_env)) as attacker:
        good.send(json.dumps({"type": "reset", "data": {"dataset_name": "chain_sum", "seed": 4, "size": 20}}))
        good.recv(timeout=10)
        attacker.send(json.dumps({"type": "reset", "data": SLOW_BUILD}))
        began = time.monotonic()
        for i in range(1, 11):  # answered while the costly build runs
            good.send(json.dumps({"type": "reset", "data": {}}))
            assert (
                json.loads(good.recv(timeout=DEADLINE_S))["data"]["observation"]["question"] == expected[i]["question"]
            )
            good.send(json.dumps({"type": "step", "data": {"answer": expected[i]["answer"]}}))
            assert json.loads(good.recv(timeout=DEADLINE_S))["data"]["reward"] == 1.0
        error = json.loads(attacker.recv(timeout=DEADLINE_S + 30 - (time.monotonic() - began)))
        assert error["type"] == "error", error
        assert error["data"]["code"] == "DATASET_TOO_COSTLY", error
        # The attacker's session lives on and can still pick a sane dataset.
        attacker.send(json.dumps({"type": "reset", "data": {"dataset_name": "chain_sum", "seed": 4, "size": 20}}))
        assert json.loads(attacker.recv(timeout=10))["data"]["observation"]["question"] == expected[0]["question"]
    health = httpx.get(f"{hostile_env}/health", timeout=10).json()
    assert health["status"] == "healthy"
    assert health["dataset_worker_restarts"] >= 1


def test_an_answer_that_never_finishes_scoring_scores_zero(hostile_env: str) -> None:
    expected = reasoning_gym.create_dataset("countdown", seed=1, size=4)
    with ReasoningGymEnv(base_url=hostile_env, message_timeout_s=DEADLINE_S + 20).sync() as env:
        env.reset(dataset_name="countdown", seed=1, size=4)
        result = env.step(ReasoningGymAction(answer="9**9**9**9"))  # countdown evaluates the answer
        assert (result.reward, result.done) == (0.0, True)
        assert "DATASET_BUILD_TIMEOUT_S" in result.observation.metadata["scoring_error"]
        assert env.reset().observation.question == expected[1]["question"]
        assert env.step(ReasoningGymAction(answer=expected[1]["answer"])).reward == 1.0
