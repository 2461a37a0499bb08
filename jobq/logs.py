"""Logging to stderr, one line per event: plain text, or JSON lines with
``JOBQ_LOG_FORMAT=json``. Callers log a stable event name first and ``key=value``
fields after it, never a payload, a token or a password. A command's own output goes
to stdout, so that log lines never mix into it.

A warning or error repeated word for word (a crash loop, an outage) is printed at most
once a second; the next one printed says how many were left out (:class:`RepeatSummary`)."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from datetime import datetime, timezone

TEXT_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
REPEAT_INTERVAL = 1.0  # seconds: the same warning is printed at most this often
REPEAT_MEMORY = 256


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, pid, message (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class RepeatSummary(logging.Filter):
    """Lets a WARNING or ERROR line through at most once per ``interval`` seconds when
    its text repeats; the next one let through ends with how many were left out. Lines
    below WARNING and distinct lines always pass."""

    def __init__(self, interval: float = REPEAT_INTERVAL, memory: int = REPEAT_MEMORY) -> None:
        super().__init__()
        self.interval = interval
        self.memory = memory  # distinct lines remembered (the oldest are forgotten)
        self._seen: dict[str, list[float | int]] = {}  # text -> [last printed, left out since]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        text = record.getMessage()
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(text)
            if seen is not None and now - seen[0] < self.interval:
                seen[1] += 1
                return False
            left_out = int(seen[1]) if seen is not None else 0
            self._seen.pop(text, None)
            self._seen[text] = [now, 0]
            if len(self._seen) > self.memory:
                del self._seen[next(iter(self._seen))]
        if left_out:
            record.msg, record.args = f"{text} (repeated {left_out} more times, not shown)", None
        return True


def configure(*, log_format: str = "text", level: str = "INFO") -> None:
    """Send every log record of this process to stderr in the chosen format, repeated
    warnings summarised."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RepeatSummary())
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # psycopg_pool logs every reconnect attempt at WARNING with the URL's host; keep it quieter.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
