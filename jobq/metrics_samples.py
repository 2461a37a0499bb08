"""Samples of the monotonic totals, for rates over a trailing window.

The maintenance leader takes one every few seconds and keeps a quarter of an hour of
them; a rate is the difference between the live counters and the newest sample at
least a window old (the oldest one, while the history is shorter than the window).
"""

from __future__ import annotations

from jobq import queries
from jobq.db import Connection

KEEP_SECONDS = 900.0


def take(conn: Connection) -> int:
    """Record the current totals, and forget samples older than KEEP_SECONDS; returns
    the number of sample rows written."""
    taken = conn.execute(queries.COUNTER_SAMPLE_TAKE).rowcount
    conn.execute(queries.COUNTER_SAMPLE_PRUNE, {"keep_seconds": KEEP_SECONDS})
    return taken
