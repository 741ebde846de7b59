"""Fixtures shared by the unit tests."""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from reasoning_gym_env_server.environment import ReasoningGymEnvironment
from reasoning_gym_env_server.pool import WorkerPool
from reasoning_gym_env_server.ratelimit import RateLimitedLog

Scenario = Callable[[ReasoningGymEnvironment], Awaitable[Any]]


@pytest.fixture(scope="module")
def run() -> Iterator[Callable[[Scenario], Any]]:
    """Run ``scenario(env)`` on one event loop with a two-worker pool shared by the module."""
    loop = asyncio.new_event_loop()
    pool = WorkerPool(
        2, timeout_s=2, memory_mb=512, max_entry_bytes=1 << 20, warnings=RateLimitedLog(logging.getLogger("test"), 100)
    )
    loop.run_until_complete(pool.start())

    def run_scenario(scenario: Scenario) -> Any:
        env = ReasoningGymEnvironment(pool, max_dataset_size=10_000)
        try:
            return loop.run_until_complete(scenario(env))
        finally:
            env.close()

    yield run_scenario
    loop.run_until_complete(pool.close())
    loop.close()
