"""reasoning-gym env server limits: worker deadline, memory bound and replacement; rate-limited log."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from reasoning_gym_env_server import ratelimit
from reasoning_gym_env_server.errors import DatasetTooCostly
from reasoning_gym_env_server.pool import WorkerPool
from reasoning_gym_env_server.ratelimit import RateLimitedLog
from reasoning_gym_env_server.spec import dataset_request


@contextlib.asynccontextmanager
async def started_pool(timeout_s: float) -> AsyncIterator[WorkerPool]:
    """One worker with a 256 MB bound, closed after the block."""
    pool = WorkerPool(
        1,
        timeout_s=timeout_s,
        memory_mb=256,
        max_entry_bytes=1 << 20,
        warnings=RateLimitedLog(logging.getLogger("test"), 10),
    )
    await pool.start()
    try:
        yield pool
    finally:
        await pool.close()


def test_a_call_past_the_deadline_is_killed_without_blocking_the_loop_and_the_worker_is_replaced() -> None:
    slow = dataset_request("acre", 1, 1_000_000, max_size=1_000_000)
    cheap = dataset_request("chain_sum", 1, 10, max_size=1_000_000)

    async def scenario() -> None:
        async with started_pool(timeout_s=1) as pool:
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            with pytest.raises(DatasetTooCostly, match="DATASET_BUILD_TIMEOUT_S=1s"):
                await pool.entries(slow, 0, 1)
            ticker.cancel()
            assert ticks > 20  # the loop kept running (about 100 ticks in the 1 s deadline)
            entries = await pool.entries(cheap, 0, 4)  # served by the replacement worker
            assert len(entries) >= 1
            assert pool.restarts == 1

    asyncio.run(scenario())


def test_a_caller_cancelled_mid_call_leaves_its_worker_to_finish_and_serve_the_next_call() -> None:
    # A session closed while its questions are being prefetched cancels the call; the worker is fine.
    busy = dataset_request("acre", 1, 3000, max_size=1_000_000)  # building it takes about 0.7 s
    cheap = dataset_request("chain_sum", 1, 10, max_size=1_000_000)

    async def scenario() -> None:
        async with started_pool(timeout_s=30) as pool:
            call = asyncio.create_task(pool.entries(busy, 0, 1))
            await asyncio.sleep(0.1)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            entries = await pool.entries(cheap, 0, 1)  # the only worker, back once it replied
            assert len(entries) == 1
            assert pool.restarts == 0

    asyncio.run(scenario())


def test_memory_bound_fails_the_call_and_the_pool_recovers() -> None:
    hog = dataset_request("count_primes", 1, 2, max_size=10, dataset_config={"max_n": 200_000_000})
    cheap = dataset_request("chain_sum", 1, 10, max_size=10)

    async def scenario() -> None:
        async with started_pool(timeout_s=10) as pool:
            with pytest.raises(DatasetTooCostly, match="DATASET_BUILD_MEMORY_MB=256"):
                await pool.entries(hog, 0, 1)
            assert len(await pool.entries(cheap, 0, 1)) == 1

    asyncio.run(scenario())


def test_rate_limited_log_lets_n_lines_through_per_window_then_counts(monkeypatch, caplog) -> None:
    now = [1000.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: now[0])
    limited = RateLimitedLog(logging.getLogger("limited"), per_minute=3)
    with caplog.at_level(logging.WARNING, logger="limited"):
        for i in range(50):
            limited.warning("bad request %d", i)
        assert [r.getMessage() for r in caplog.records] == ["bad request 0", "bad request 1", "bad request 2"]
        now[0] += 61
        limited.flush()
        assert caplog.records[-1].getMessage().startswith("suppressed 47 log lines")
        limited.warning("next window")
        assert caplog.records[-1].getMessage() == "next window"


def test_rate_limited_log_as_a_filter_limits_only_warnings_and_shares_the_allowance(monkeypatch) -> None:
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: 5000.0)
    limited = RateLimitedLog(logging.getLogger("limited"), per_minute=2)

    def record(level: int) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", level, __file__, 1, "Invalid HTTP request received.", None, None)

    limited.warning("ours")
    assert [limited.filter(record(logging.WARNING)) for _ in range(3)] == [True, False, False]
    assert limited.filter(record(logging.INFO))  # start-up lines always pass
