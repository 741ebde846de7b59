"""Docker helpers shared by the container benchmarks."""

import subprocess
import time
import urllib.request
from typing import Callable, Optional


def docker(*args: str) -> str:
    """Run a docker command; returns its stdout (raises on failure)."""
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def wait_http(url: str, timeout_s: float, diagnose: Optional[Callable[[], str]] = None) -> float:
    """Poll ``url`` until it answers; returns the seconds waited. On timeout, ``diagnose()`` (e.g. the
    container's log tail) is the error message."""
    began = time.monotonic()
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return time.monotonic() - began
        except OSError:
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(diagnose() if diagnose else url) from None
            time.sleep(0.5)
