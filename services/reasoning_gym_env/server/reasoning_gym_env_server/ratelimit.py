"""A logger wrapper that lets at most N lines through per minute and counts the rest."""

import logging
import time


class RateLimitedLog:
    """Logs at most ``per_minute`` lines per 60 s window to ``logger``; the lines over the limit are
    counted and reported in one "suppressed" line when the window is over (on the next line logged
    or the next ``flush``), so a flood of bad requests cannot flood the log.

    Also a logging filter: added to another logger (uvicorn's error log), its warnings and errors
    share the same allowance."""

    WINDOW_S = 60.0

    def __init__(self, logger: logging.Logger, per_minute: int) -> None:
        self.logger = logger
        self.per_minute = per_minute
        self._window_start = time.monotonic()
        self._logged = 0
        self._suppressed = 0

    def log(self, level: int, message: str, *args: object) -> None:
        """Log ``message % args`` at ``level`` unless this window's allowance is spent."""
        if self._allow():
            self.logger.log(level, message, *args)

    def filter(self, record: logging.LogRecord) -> bool:
        """``logging.Filter`` protocol: let a warning or error through only within the allowance."""
        return record.levelno < logging.WARNING or self._allow()

    def warning(self, message: str, *args: object) -> None:
        """``log`` at WARNING."""
        self.log(logging.WARNING, message, *args)

    def _allow(self) -> bool:
        self.flush()
        if self._logged < self.per_minute:
            self._logged += 1
            return True
        self._suppressed += 1
        return False

    def flush(self) -> None:
        """If the window is over, report what it suppressed and start a new one."""
        now = time.monotonic()
        if now - self._window_start < self.WINDOW_S:
            return
        if self._suppressed:
            self.logger.warning(
                "suppressed %d log lines in the last %.0f s (LOG_LINES_PER_MINUTE=%d)",
                self._suppressed,
                now - self._window_start,
                self.per_minute,
            )
        self._window_start, self._logged, self._suppressed = now, 0, 0
