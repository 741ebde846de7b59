"""Wait, at a job's start, until the services it needs answer ``/health``: the stack starts a job
as soon as the services of its *first* job are up, so a job whose services start later (AsyncGRPO
needs vLLM, which compiles for minutes on CPU) waits for them here, with a deadline."""

import logging
import time
from collections.abc import Callable, Mapping

import httpx

from .errors import EnvUnavailable

log = logging.getLogger(__name__)
POLL_S = 2.0


def answers_health(url: str) -> bool:
    """Whether ``url``'s ``/health`` answers 200 within a few seconds."""
    try:
        return httpx.get(f"{url.rstrip('/')}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until_healthy(
    services: Mapping[str, str],
    timeout_s: float,
    healthy: Callable[[str], bool] = answers_health,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once every ``name -> url`` in ``services`` is healthy; one log line while waiting and
    one when ready. Raises ``EnvUnavailable`` naming those still down after ``timeout_s``."""
    began = clock()
    waiting = [name for name, url in services.items() if not healthy(url)]
    if not waiting:
        return
    log.info("waiting up to %.0f s for %s", timeout_s, ", ".join(f"{n} ({services[n]})" for n in waiting))
    while waiting:
        if clock() - began > timeout_s:
            raise EnvUnavailable(
                f"{', '.join(f'{n} at {services[n]}' for n in waiting)} did not answer /health within "
                f"{timeout_s:.0f} s: `docker compose ps` and `docker compose logs {' '.join(waiting)}` tell why"
            )
        sleep(POLL_S)
        waiting = [name for name in waiting if not healthy(services[name])]
    log.info("%s healthy after %.0f s", ", ".join(services), clock() - began)
