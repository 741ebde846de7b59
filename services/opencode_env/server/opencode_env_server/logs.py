"""Rate-limited logging: a flood of bad requests must not flood the service's log."""

import logging
import time


class RateLimit(logging.Filter):
    """Passes at most ``burst`` warnings and errors per logger and ``interval_s``; then one line
    saying how many were suppressed once the interval is over. INFO and below always pass."""

    def __init__(self, burst: int = 20, interval_s: float = 10.0) -> None:
        super().__init__()
        self.burst, self.interval_s = burst, interval_s
        self._windows: dict[str, list[float | int]] = {}  # logger -> [window start, passed, suppressed]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        now = time.monotonic()
        window = self._windows.setdefault(record.name, [now, 0, 0])
        if now - window[0] > self.interval_s:
            if window[2]:
                record.msg = f"({window[2]} similar lines suppressed in the last {self.interval_s:g}s) {record.msg}"
            window[:] = [now, 0, 0]
        if window[1] < self.burst:
            window[1] += 1
            return True
        window[2] += 1
        return False
