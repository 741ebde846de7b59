"""ReplicaPool: rollouts start on the replica with the most free slots and stay on it; dead replicas
are skipped until they answer again (fake replicas behind a fake resolver)."""

import time

import httpx
import pytest
from opencode_env_client import OpenCodeEnvError, OpenCodeServiceSessionFactory, ReplicaPool, ServiceBusyError
from opencode_env_client.models import CreatedRollout, RolloutSummary, Verification

from .test_opencode_client import TASK, health


class Replicas:
    """Several fake opencode-env replicas, by IP; each counts what it served."""

    def __init__(self, *addresses: str, max_rollouts: int = 2) -> None:
        self.active = {a: 0 for a in addresses}
        self.started = {a: 0 for a in addresses}
        self.calls: dict[str, list[str]] = {a: [] for a in addresses}
        self.down: set[str] = set()
        self.max_rollouts = max_rollouts

    def __call__(self, request: httpx.Request) -> httpx.Response:
        address, path = request.url.host, request.url.path
        if address in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.calls[address].append(f"{request.method} {path}")
        if path == "/health":
            return httpx.Response(
                200,
                json=health(
                    self.active[address], self.max_rollouts, self.started[address], replica=address
                ).model_dump(),
            )
        if request.method == "POST" and path == "/rollouts":
            if self.active[address] >= self.max_rollouts:
                return httpx.Response(503, json={"detail": {"message": "all rollout slots are busy"}})
            self.active[address] += 1
            self.started[address] += 1
            rollout = f"{address}-{self.started[address]}"
            return httpx.Response(
                201,
                json=CreatedRollout(
                    rollout_id=rollout,
                    task_id="t1",
                    api_key="k",
                    status="running",
                    proxy_base_url=f"http://{address}:8000/v1",
                    model="m",
                ).model_dump(),
            )
        rollout = path.split("/")[2]
        if not rollout.startswith(address):
            return httpx.Response(404, json={"detail": {"message": f"unknown rollout {rollout}"}})
        if path.endswith("/wait"):
            return httpx.Response(
                200,
                json=RolloutSummary(
                    rollout_id=rollout, task_id="t1", status="completed", final=True, turns=1, created_at=0.0
                ).model_dump(),
            )
        if path.endswith("/verify"):
            return httpx.Response(200, json=Verification(reward=1.0, passed=1, total=1, results=[]).model_dump())
        if request.method == "DELETE":
            self.active[address] -= 1
            return httpx.Response(204)
        return httpx.Response(404, json={"detail": {"message": path}})


def pool_of(
    replicas: Replicas, names: dict[str, list[str]], base_url: str = "http://opencode-env:8000", **kwargs
) -> ReplicaPool:
    return ReplicaPool(
        base_url, resolve=lambda host, port: names.get(host, []), transport=httpx.MockTransport(replicas), **kwargs
    )


def test_rollouts_spread_by_free_slots_and_every_call_stays_on_its_replica() -> None:
    replicas = Replicas("10.0.0.2", "10.0.0.3")
    factory = OpenCodeServiceSessionFactory("http://opencode-env:8000", [TASK])
    factory._replicas = pool_of(replicas, {"tasks.opencode-env": ["10.0.0.2", "10.0.0.3"]})
    sessions = [factory.create(TASK) for _ in range(4)]
    assert replicas.started == {"10.0.0.2": 2, "10.0.0.3": 2}
    for session in sessions:
        session.wait_for_completion()
        assert session.verify([]).env_reward == 1.0
        session.close()
    for address, calls in replicas.calls.items():
        rollout_calls = [c for c in calls if "/rollouts/" in c]
        # Each replica saw wait, verify and close of exactly its own two rollouts (a foreign one would 404).
        assert len(rollout_calls) == 6
        assert all(address in c for c in rollout_calls)
    # A replica with more free slots is preferred: free the second one's slots, fill the first's.
    assert replicas.active == {"10.0.0.2": 0, "10.0.0.3": 0}
    replicas.active["10.0.0.2"] = 1
    assert factory.create(TASK).client.base_url == "http://10.0.0.3:8000"


def test_the_service_name_is_used_when_tasks_do_not_resolve_and_an_ip_url_is_one_replica() -> None:
    replicas = Replicas("10.0.0.5", "10.0.0.6")
    pool = pool_of(replicas, {"opencode-env": ["10.0.0.5", "10.0.0.6"]})  # dnsrr: the name lists the replicas
    assert pool.addresses() == ["10.0.0.5", "10.0.0.6"]
    single = pool_of(replicas, {}, base_url="http://10.0.0.5:8000")
    client, created = single.start(lambda c: c.create_rollout(TASK))
    assert client.base_url == "http://10.0.0.5:8000"
    assert created.rollout_id.startswith("10.0.0.5")


def test_a_dead_replica_is_skipped_and_takes_work_again_when_it_answers() -> None:
    replicas = Replicas("10.0.0.2", "10.0.0.3", max_rollouts=8)
    pool = pool_of(replicas, {"tasks.opencode-env": ["10.0.0.2", "10.0.0.3"]}, retry_s=0.2)
    replicas.down.add("10.0.0.3")
    for _ in range(3):
        client, _ = pool.start(lambda c: c.create_rollout(TASK))
        assert client.base_url == "http://10.0.0.2:8000"
    assert replicas.started == {"10.0.0.2": 3, "10.0.0.3": 0}
    replicas.down.clear()
    time.sleep(0.25)
    client, _ = pool.start(lambda c: c.create_rollout(TASK))
    assert client.base_url == "http://10.0.0.3:8000"  # back, with more free slots: it takes the next rollout
    replicas.down.update(replicas.active)
    with pytest.raises(OpenCodeEnvError, match="no replica of http://opencode-env:8000 answers"):
        pool.start(lambda c: c.create_rollout(TASK))


def test_a_full_replica_passes_the_rollout_on_and_all_full_is_busy() -> None:
    replicas = Replicas("10.0.0.2", "10.0.0.3", max_rollouts=1)
    pool = pool_of(replicas, {"tasks.opencode-env": ["10.0.0.2", "10.0.0.3"]})
    pool.health = lambda: {a: health(0, 1, 0, a) for a in ("10.0.0.2", "10.0.0.3")}  # stale: both look free
    first, _ = pool.start(lambda c: c.create_rollout(TASK))
    second, _ = pool.start(lambda c: c.create_rollout(TASK))
    assert {first.base_url, second.base_url} == {"http://10.0.0.2:8000", "http://10.0.0.3:8000"}
    with pytest.raises(ServiceBusyError, match="could start the rollout.*busy") as error:
        pool.start(lambda c: c.create_rollout(TASK))
    assert error.value.status == 503


def test_a_refused_request_is_not_retried_on_other_replicas() -> None:
    replicas = Replicas("10.0.0.2", "10.0.0.3")
    pool = pool_of(replicas, {"tasks.opencode-env": ["10.0.0.2", "10.0.0.3"]})
    with pytest.raises(OpenCodeEnvError, match="HTTP 404"):
        pool.start(lambda c: c.status("10.0.0.9-1"))
    assert sum("/rollouts/" in c for calls in replicas.calls.values() for c in calls) == 1


def test_concurrent_starts_see_each_others_picks() -> None:
    import threading

    replicas = Replicas("10.0.0.2", "10.0.0.3", max_rollouts=4)
    pool = pool_of(replicas, {"tasks.opencode-env": ["10.0.0.2", "10.0.0.3"]})
    gate = threading.Barrier(4)

    def slow_create(client):  # no create reaches a replica before all four have picked one
        gate.wait(timeout=10)
        return client.create_rollout(TASK)

    threads = [threading.Thread(target=pool.start, args=(slow_create,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert replicas.started == {"10.0.0.2": 2, "10.0.0.3": 2}
