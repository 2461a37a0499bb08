"""Samples of the monotonic totals, for rates over a trailing window.

The maintenance leader takes one every few seconds and keeps them for
JOBQ_SAMPLE_RETENTION (a quarter of an hour, the longest window, or more); a rate is
the difference between the live counters and the newest sample at least a window old
(the oldest one, while the history is shorter than the window).
"""

from __future__ import annotations

from jobq.store.sql.counters import COUNTER_SAMPLE_PRUNE, COUNTER_SAMPLE_TAKE
from jobq.store.connections import Connection
from jobq.settings import DEFAULT_SAMPLE_RETENTION


def take(conn: Connection, keep_seconds: float = DEFAULT_SAMPLE_RETENTION) -> int:
    """Record the current totals, and forget samples older than ``keep_seconds``;
    returns the number of sample rows written."""
    taken = conn.execute(COUNTER_SAMPLE_TAKE).rowcount
    conn.execute(COUNTER_SAMPLE_PRUNE, {"keep_seconds": keep_seconds})
    return taken
