"""How many jobs of each status match a filter, as cheaply as the filter allows:
exact from the counters (``job_counters``) when the filter names only status, queue and
type (the counters' own keys), else counted up to a cap and labelled so.

The dashboard's status tabs show these; the exact number an action will touch comes
from its dry run (:func:`jobq.jobs.operations.count`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from jobq.store.sql.counters import COUNTER_LIST
from jobq.store.sql.ledger import JOB_COUNT_BY_STATUS_UP_TO
from jobq.store.sql.queues import JOB_COUNT_SCHEDULED_UP_TO
from jobq.store.connections import Connection, connection
from jobq.jobs.filters import JobFilter, parse_filter
from jobq.job import STATUSES
from jobq.jobs.ledger import COUNT_LIMIT

COUNTER_CRITERIA = frozenset({"status", "queue", "type"})


@dataclass(frozen=True, slots=True)
class Tally:
    """Jobs per status matching a filter (its status left out), and their total.

    ``exact`` False: more than ``cap`` jobs match; ``total`` is then ``cap`` (a lower
    bound) and ``by_status`` is empty (the first ``cap`` rows say nothing of the rest)."""

    by_status: dict[str, int]
    total: int
    exact: bool
    cap: int


def by_status(job_filter: JobFilter | dict[str, Any], *, cap: int = COUNT_LIMIT, conn: Connection | None = None) -> Tally:
    """Count the jobs matching ``job_filter`` without its ``status``, per status.

    Exact and without touching ``jobs`` when the rest names only queue and type (the
    counters, a few hundred rows); otherwise one statement that reads at most ``cap`` + 1
    matching rows. Raises :class:`jobq.errors.InvalidArgument` naming a bad criterion."""
    job_filter = parse_filter(job_filter)
    rest = job_filter.model_copy(update={"status": None})
    with connection(conn) as c:
        if set(rest.given()) <= COUNTER_CRITERIA:
            counts = _from_counters(c, rest.queue, rest.type)
            return Tally(counts, sum(counts.values()), True, cap)
        query = sql.SQL(JOB_COUNT_BY_STATUS_UP_TO).format(conditions=rest.conditions())
        rows = c.execute(query, {**rest.params(), "cap": cap + 1}).fetchall()
    counted = {status: 0 for status in STATUSES}
    for status, n in rows:
        counted[status] = int(n)
    total = sum(counted.values())
    if total > cap:
        return Tally({}, cap, False, cap)
    return Tally(counted, total, True, cap)


def _from_counters(conn: Connection, queue: str | None, job_type: str | None) -> dict[str, int]:
    counted: dict[str, int] = defaultdict(int)
    for row_queue, row_type, name, n in conn.execute(COUNTER_LIST):
        if name in STATUSES and queue in (None, row_queue) and job_type in (None, row_type):
            counted[name] += int(n)
    return {status: counted[status] for status in STATUSES}


def scheduled(queues: list[str], *, cap: int = COUNT_LIMIT, conn: Connection | None = None) -> dict[str, int]:
    """Pending jobs not due yet (``run_at`` in the future) per queue, each counted up to
    ``cap`` + 1 (more than ``cap`` reads as ``cap + 1``: show it as "cap+"). One statement,
    a few ranges of the claim index per queue."""
    with connection(conn) as c:
        rows = c.execute(JOB_COUNT_SCHEDULED_UP_TO, {"queues": queues, "cap": cap + 1}).fetchall()
    return {queue: int(n) for queue, n in rows}
