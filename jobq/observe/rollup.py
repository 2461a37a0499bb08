"""A per-minute rollup of what the queue did, kept a day or more: the dashboard's
charts of completions, failures, depth, run time and start latency over 15 minutes,
an hour and a day, per queue and for all queues (table ``jobq_minutes``, schema 9).

The maintenance leader calls :func:`take` every few seconds (the ``rollup`` duty). A
minute is rolled up once it has been over for SETTLE (so that outcomes written at its
end have committed), into one row per queue and one for all queues together (queue
``''``):

- ``completed``, ``dead``, ``cancelled``: jobs that finished so in the minute (by
  ``completed_at``), and the p50/p95/p99 of run time (started -> completed) and start
  latency (run_at, or created_at for a job due at once, -> started) of the jobs done
  in it, computed by PostgreSQL (``percentile_cont``) over that minute's rows: one
  range of ``jobs_completed_idx``, whatever the size of the table. Exactly while the
  newest minute rolled up before had at most PERCENTILE_SAMPLE jobs done (in the
  queue, or in all queues for the row of all); above that, over every k-th job by
  id, k being that count over PERCENTILE_SAMPLE, rounded up (sorting every job of a
  minute at 6,000 jobs/s took 0.6-1.3 s of a core each minute);
- ``failed``: failed runs (retried or dead), the growth of the ``failed_runs_total``
  counters between the minute's newest sample and the one before it (the samples are
  taken every 5 s, so a failure in a minute's last seconds may count in the next one;
  a minute with no sample, the leader being away, has none);
- ``pending``, ``running``: the depth from the counters, read when the minute is rolled
  up (seconds after its end). A minute rolled up more than LATE after its end (caught
  up after the leader was away) has no depth: 0 in its :class:`Point`, as a minute
  without a row.

Idempotent per minute: the primary key (queue, minute) and ``ON CONFLICT DO NOTHING``
write a minute once whatever the number of leaders during a failover. The minutes
missed while no leader ran are caught up, MINUTES_PER_PASS per call and never further
back than CATCH_UP; with an empty table the rollup starts at the newest minute due.
:func:`prune` forgets rows past ``JOBQ_ROLLUP_RETENTION``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobq.store.sql.counters import COUNTER_SAMPLE_FAILED_BY_MINUTE
from jobq.store.sql.database import DATABASE_NOW
from jobq.store.sql.rollup import (
    JOB_FINISHED_BY_MINUTE,
    JOB_FINISHED_BY_MINUTE_SAMPLED,
    MINUTE_DELETE_BEFORE,
    MINUTE_GET_LAST,
    MINUTE_INSERT_IF_ABSENT,
    MINUTE_LIST_COMPLETED,
    MINUTE_LIST_OF_QUEUE,
)
from jobq.store.connections import Connection, connection
from jobq.errors import InvalidArgument
from jobq.jobs.ledger import counts
from jobq.spec import MAX_QUEUE_LENGTH, check_text

WINDOWS = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "24h": timedelta(hours=24)}

MINUTE = timedelta(minutes=1)
SETTLE = timedelta(seconds=5)  # a minute is rolled up this long after its end, not before
LATE = timedelta(seconds=60)  # rolled up later than this after its end: its depth is not known
SHOWN_LAG = timedelta(seconds=15)  # series() ends at the newest minute over this long ago
PERCENTILE_SAMPLE = 20_000  # jobs done in a minute above which percentiles are sampled
MINUTES_PER_PASS = 15  # minutes caught up by one call of take() at most
CATCH_UP = max(WINDOWS.values())  # minutes older than this are never caught up
ALL = ""  # the queue of the rows of all queues together

_COUNTS = ("completed", "failed", "dead", "cancelled")
_PERCENTILES = ("run_p50", "run_p95", "run_p99", "latency_p50", "latency_p95", "latency_p99")


@dataclass(frozen=True)
class Point:
    """One minute of one queue (or of all): counts in the minute, depth when it was rolled
    up, percentiles in seconds (None without a job done in the minute)."""

    minute: datetime
    completed: int
    failed: int
    dead: int
    cancelled: int
    pending: int
    running: int
    run_p50: float | None
    run_p95: float | None
    run_p99: float | None
    latency_p50: float | None
    latency_p95: float | None
    latency_p99: float | None

    @classmethod
    def empty(cls, minute: datetime) -> Point:
        """A minute without a row: zeros, and no percentiles."""
        return cls(minute, 0, 0, 0, 0, 0, 0, None, None, None, None, None, None)


def _sampling(conn: Connection, last: datetime | None) -> dict[str, int]:
    """Per queue ('' for all), every how many jobs the percentiles of the next minutes
    take: from the jobs done in the newest minute rolled up, ``last``."""
    if last is None:
        return {}
    done = conn.execute(MINUTE_LIST_COMPLETED, {"minute": last}).fetchall()
    return {queue: -(-completed // PERCENTILE_SAMPLE) for queue, completed in done if completed > PERCENTILE_SAMPLE}


def take(conn: Connection, *, now: datetime | None = None) -> int:
    """The duty: roll up the whole minutes not yet rolled up (at most MINUTES_PER_PASS of
    them, none older than CATCH_UP), each SETTLE after its end; returns rows written.
    ``now`` defaults to the database's clock."""
    if now is None:
        now = conn.execute(DATABASE_NOW).fetchone()[0]  # type: ignore[index]
    newest = _floor(now - SETTLE) - MINUTE
    (last,) = conn.execute(MINUTE_GET_LAST).fetchone()  # type: ignore[misc]
    first = newest if last is None else max(last + MINUTE, _floor(now) - CATCH_UP)
    if first > newest:
        return 0
    minutes = [first + i * MINUTE for i in range(min(MINUTES_PER_PASS, (newest - first) // MINUTE + 1))]
    every = _sampling(conn, last)
    every_all = every.pop(ALL, 1)
    window = {
        "start": minutes[0], "end": minutes[-1] + MINUTE, "every_all": every_all,
        "queues": list(every), "every": list(every.values()),
    }
    sampled = every_all > 1 or bool(every)
    statement = JOB_FINISHED_BY_MINUTE_SAMPLED if sampled else JOB_FINISHED_BY_MINUTE
    finished: dict[tuple[datetime, str], tuple[Any, ...]] = {}
    for minute, queue, done, dead, cancelled, runs, latencies, runs_all, latencies_all in conn.execute(
        statement, window
    ):
        finished[minute, queue] = (done, dead, cancelled, *((runs_all, latencies_all) if queue == ALL else (runs, latencies)))
    failed = {
        (minute, queue): int(n)
        for minute, queue, n in conn.execute(COUNTER_SAMPLE_FAILED_BY_MINUTE, {"minutes": minutes})
    }
    failed_all: Counter[datetime] = Counter()
    for (minute, _), n in failed.items():
        failed_all[minute] += n
    reading = counts(conn=conn)
    depth = {queue: values for queue, values in reading.queues.items() if queue != ALL}
    depth[ALL] = reading.depth
    rows = []
    for minute in minutes:
        known = now - (minute + MINUTE) <= LATE
        queues = {q for q in depth if q != ALL} | {q for (m, q) in [*finished, *failed] if m == minute and q != ALL}
        for queue in sorted(queues) + [ALL]:
            done, dead, cancelled, runs, latencies = finished.get((minute, queue), (0, 0, 0, None, None))
            runs_failed = failed_all[minute] if queue == ALL else failed.get((minute, queue), 0)
            values = depth.get(queue, {}) if known else None
            rows.append(
                (minute, queue, done, runs_failed, dead, cancelled,
                 values.get("pending", 0) if values is not None else None,
                 values.get("running", 0) if values is not None else None,
                 *(runs or (None,) * 3), *(latencies or (None,) * 3))
            )
    columns = ("minutes", "queues", *_COUNTS, "pending", "running", *_PERCENTILES)
    params = {name: [row[i] for row in rows] for i, name in enumerate(columns)}
    return conn.execute(MINUTE_INSERT_IF_ABSENT, params).rowcount


def prune(conn: Connection, keep: timedelta) -> int:
    """Forget the minutes older than ``keep`` (by the database's clock); returns rows deleted."""
    (now,) = conn.execute(DATABASE_NOW).fetchone()  # type: ignore[misc]
    return conn.execute(MINUTE_DELETE_BEFORE, {"before": now - keep}).rowcount


def series(window: str, *, queue: str | None = None, conn: Connection | None = None) -> list[Point]:
    """One :class:`Point` per minute of ``window`` (a key of WINDOWS), oldest first,
    ending with the newest minute the leader has had time to roll up (the one that
    ended over SHOWN_LAG ago); a minute without a row is :meth:`Point.empty`.

    ``queue`` None: all queues together, from the rows the leader writes for them
    (queue ``''``): counts and depth are the sums over the queues, and the
    percentiles are exact percentiles of all the jobs done in the minute, whatever
    their queue (computed from the jobs, not combined from the queues' percentiles).
    A queue never seen has zeros. Raises :class:`InvalidArgument` naming ``window``
    or ``queue``.
    """
    span = WINDOWS.get(window) if isinstance(window, str) else None
    if span is None:
        raise InvalidArgument("window", f"must be one of {', '.join(WINDOWS)}")
    if queue is not None:
        _check_queue(queue)
    with connection(conn) as c:
        (now,) = c.execute(DATABASE_NOW).fetchone()  # type: ignore[misc]
        last = _floor(now - SHOWN_LAG) - MINUTE
        first = last - span + MINUTE
        params = {"queue": ALL if queue is None else queue, "first": first, "last": last}
        stored = {row[0]: row for row in c.execute(MINUTE_LIST_OF_QUEUE, params)}
    points = []
    for i in range(span // MINUTE):
        minute = first + i * MINUTE
        row = stored.get(minute)
        points.append(Point.empty(minute) if row is None else _point(row))
    return points


def _point(row: tuple[Any, ...]) -> Point:
    minute, completed, failed, dead, cancelled, pending, running, *percentiles = row
    return Point(
        minute, int(completed), int(failed), int(dead), int(cancelled), int(pending or 0), int(running or 0),
        *percentiles,
    )


def _check_queue(queue: object) -> None:
    if not isinstance(queue, str) or not 1 <= len(queue) <= MAX_QUEUE_LENGTH:
        raise InvalidArgument("queue", f"must be a queue name of 1 to {MAX_QUEUE_LENGTH} characters")
    try:
        check_text(queue)
    except ValueError as exc:
        raise InvalidArgument("queue", str(exc)) from None


def _floor(moment: datetime) -> datetime:
    """The start of ``moment``'s minute."""
    return moment.replace(second=0, microsecond=0)

