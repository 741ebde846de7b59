"""The OpenCode env client and its OpenEnv harness sessions, against a recorded fake of the API."""

import json
import pickle

import httpx
import pytest
from opencode_env_client import (
    OpenCodeEnvClient,
    OpenCodeEnvError,
    OpenCodeServiceSessionFactory,
    ReplicaPool,
    RolloutNotScorable,
    ServiceBusyError,
)
from opencode_env_client.models import CreatedRollout, Health, RolloutSummary, Task, Verification
from openenv.core.harness import TrainableSession

TASK = {
    "task_id": "t1",
    "instruction": "Write solution.py that reverses a line.",
    "tests": [{"stdin": "ab\n", "expected_stdout": "ba"}],
}
TRACE = {
    "schema_version": 1,
    "turns": [
        {
            "node_id": "r1:0",
            "prompt_token_ids": [1, 2, 3],
            "completion_token_ids": [4, 5],
            "per_token_logps": [-0.5, -1.0],
            "loss_mask": [0, 0, 0, 1, 1],
            "request": {"messages": []},
            "response": {},
            "metadata": {},
        }
    ],
}


class FakeService:
    """Answers like the service; records the requests."""

    def __init__(self, reward=1.0, busy=False):
        self.requests: list[httpx.Request] = []
        self.reward, self.busy, self.waits = reward, busy, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200, json=health(active=0).model_dump())
        if request.method == "POST" and path == "/rollouts":
            if self.busy:
                return httpx.Response(503, json={"detail": {"message": "all 4 rollout slots are busy"}})
            created = CreatedRollout(
                rollout_id="r1",
                task_id="t1",
                api_key="k",
                status="running",
                proxy_base_url="http://opencode-env:8000/v1",
                model="policy",
            )
            return httpx.Response(201, json=created.model_dump())
        if path == "/rollouts/r1/wait":
            self.waits += 1
            final = self.waits >= 2
            summary = RolloutSummary(
                rollout_id="r1",
                task_id="t1",
                status="completed" if final else "running",
                final=final,
                turns=1,
                agent_exit_code=0,
                created_at=0.0,
            )
            return httpx.Response(200, json=summary.model_dump())
        if path == "/rollouts/r1/trace":
            return httpx.Response(200, json=TRACE)
        if path == "/rollouts/r1/verify":
            verification = Verification(
                reward=self.reward, passed=1, total=1, results=[], reason="not scored: infra_failure (upstream down)"
            )
            return httpx.Response(200, json=verification.model_dump())
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(404, json={"detail": {"message": f"unknown rollout {path}"}})


def health(active: int, max_rollouts: int = 4, total: int = 0, replica: str = "a") -> Health:
    return Health(
        status="healthy",
        active_rollouts=active,
        max_rollouts=max_rollouts,
        seats=max_rollouts + 1,
        warm_agents=1,
        sessions=0,
        max_sessions=16,
        inference_url="http://inference:8000",
        network_isolation=True,
        replica=replica,
        rollouts_total=total,
    )


def factory_with(service: FakeService, **kwargs) -> OpenCodeServiceSessionFactory:
    factory = OpenCodeServiceSessionFactory("http://opencode-env:8000", [TASK], sampling={"temperature": 0.7}, **kwargs)
    factory._replicas = ReplicaPool(
        factory.base_url, poll_s=0.01, resolve=lambda host, port: [], transport=httpx.MockTransport(service)
    )
    return factory


def test_session_runs_the_harness_protocol():
    service = FakeService()
    factory = factory_with(service)
    session = factory.create([{"role": "user", "content": TASK["instruction"]}], seed=3, episode_id="e")
    assert isinstance(session, TrainableSession)
    assert session.wait_for_completion() == 0
    assert service.waits == 2
    trace = session.fetch_training_trace()
    assert trace.turns[0].completion_token_ids == [4, 5]
    result = session.verify([])
    assert result.env_reward == 1.0
    assert result.metrics["tests_passed"] == 1
    session.close()
    session.close()  # idempotent
    created = json.loads(next(r for r in service.requests if r.url.path == "/rollouts").content)
    assert Task.model_validate(created["task"]) == Task.model_validate(TASK)
    assert created["sampling"] == {"temperature": 0.7}
    assert session.task_id == "t1"
    assert [r.method for r in service.requests].count("DELETE") == 1
    assert {r.url.host for r in service.requests} == {"opencode-env"}  # one name, resolved to nothing else


def test_the_trainers_chat_template_settings_reach_every_model_call():
    """TRL's harness gives the factory its sampling policy only; Qwen3's thinking switch comes from the
    trainer's config and must be forced on the engine's calls like the policy."""
    service = FakeService()
    factory_with(service, chat_template_kwargs={"enable_thinking": False}).create(TASK)
    created = json.loads(next(r for r in service.requests if r.url.path == "/rollouts").content)
    assert created["sampling"] == {"temperature": 0.7, "chat_template_kwargs": {"enable_thinking": False}}


def test_infrastructure_failure_is_not_scored_zero():
    session = factory_with(FakeService(reward=None)).create(TASK)
    with pytest.raises(RolloutNotScorable, match="infra_failure"):
        session.verify([])


def test_unknown_prompt_capacity_and_errors_are_clear():
    with pytest.raises(KeyError, match="no task with the instruction"):
        factory_with(FakeService()).create([{"role": "user", "content": "something else"}])
    with pytest.raises(ServiceBusyError, match="slots are busy"):
        factory_with(FakeService(busy=True)).create(TASK)
    client = OpenCodeEnvClient("http://x", transport=httpx.MockTransport(FakeService()))
    with pytest.raises(OpenCodeEnvError, match="HTTP 404: unknown rollout") as error:
        client.status("nope")
    assert error.value.status == 404


def test_factory_pickles_without_its_connection():
    factory = factory_with(FakeService())
    clone = pickle.loads(pickle.dumps(factory))
    assert clone._replicas is None
    assert clone.tasks == factory.tasks
    assert clone.sampling == {"temperature": 0.7}
