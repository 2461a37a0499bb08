"""Queue metrics, computed from the database when asked: :func:`snapshot`.

Depth and totals come from the ``job_counters`` table (exact, no scan of ``jobs``);
the trailing-window values from the finished rows of the last ``window`` seconds
(an index range scan on ``completed_at``). The web app's ``/metrics`` and
``/metrics/prometheus`` render the same :class:`Metrics`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from jobq import queries
from jobq.db import Connection, connection
from jobq.ledger import counts

DEFAULT_WINDOW = 60.0  # seconds: the trailing window of jobs_per_second and avg_execution_seconds


@dataclass(frozen=True, slots=True)
class Metrics:
    """One reading of the queue, under the seed's field names."""

    queue_depth: dict[str, int]
    """Jobs in each of the six statuses now, zeros included."""
    active_workers: int
    """Worker processes whose heartbeat is fresher than the stale threshold."""
    jobs_per_second: float
    """Jobs finished done in the trailing window, per second."""
    error_rate: float
    """Failed runs / (failed runs + successful runs), all time; 0.0 before any run."""
    avg_execution_seconds: float | None
    """Mean run time of the jobs finished done in the trailing window; None if none."""
    total_jobs: int
    """Jobs ever enqueued (counted at enqueue)."""
    dead_letter_count: int
    """Rows in the dead-letter table."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return dataclasses.asdict(self)


def snapshot(*, stale_seconds: float, window: float = DEFAULT_WINDOW, conn: Connection | None = None) -> Metrics:
    """Read the metrics now, in two round trips.

    ``stale_seconds`` is the heartbeat age past which a worker no longer counts as
    active (``JOBQ_STALE_THRESHOLD``). Raises :class:`DatabaseUnavailable`.
    """
    with connection(conn) as c:
        reading = counts(conn=c)
        row = c.execute(queries.METRICS_SNAPSHOT, {"stale_seconds": stale_seconds, "window": window}).fetchone()
    active, done_in_window, avg_seconds, dead_letters = row  # type: ignore[misc]
    done = reading.totals.get("done_total", 0)
    failed = reading.totals.get("failed_runs_total", 0)
    return Metrics(
        queue_depth=reading.depth,
        active_workers=int(active),
        jobs_per_second=int(done_in_window) / window,
        error_rate=failed / (done + failed) if done + failed else 0.0,
        avg_execution_seconds=float(avg_seconds) if avg_seconds is not None else None,
        total_jobs=reading.totals.get("enqueued_total", 0),
        dead_letter_count=int(dead_letters),
    )
