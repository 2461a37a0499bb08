"""Logging to stdout, one line per event: plain text, or JSON lines with
``JOBQ_LOG_FORMAT=json``. Callers log a stable event name first and ``key=value``
fields after it, never a payload, a token or a password."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

TEXT_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"


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


def configure(*, log_format: str = "text", level: str = "INFO") -> None:
    """Send every log record of this process to stdout in the chosen format."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # psycopg_pool logs every reconnect attempt at WARNING with the URL's host; keep it quieter.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
