"""Reading the ledger: ``get``, ``list_jobs``, ``counts``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row

from jobq.store.sql.counters import COUNTER_LIST
from jobq.store.sql.ledger import (
    JOB_GET,
    JOB_GET_CREATED_AT,
    JOB_LIST_AFTER,
    JOB_LIST_COUNT,
    JOB_LIST_COUNT_UP_TO,
    JOB_LIST_FEW,
    JOB_LIST_PAGE,
    LISTING_SNAPSHOT,
)
from jobq.jobs import cursors
from jobq.store.connections import Connection, connection
from jobq.errors import InvalidArgument, JobNotFound
from jobq.jobs.filters import MAX_ID, parse_filter
from jobq.job import STATUSES, Job

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# With a criterion beyond the seed's (tag, ids, created_before, error, schedule), a listing's total
# is counted this far past the offset, no further: the first page of a tag that half
# the table carries answers in milliseconds.
COUNT_LIMIT = 10_000
SEED_CRITERIA = frozenset({"status", "type", "queue", "created_after"})

Row = TypeVar("Row")


@dataclass(frozen=True, slots=True)
class Page(Generic[Row]):
    """One page of a listing and the number of rows matching its filters."""

    items: list[Row]
    total: int
    limit: int
    offset: int
    total_exact: bool = True  # False: ``total`` is a lower bound (list_jobs' COUNT_LIMIT)
    next_cursor: str | None = None  # list_jobs: the next page's cursor; None on the last page


def get(job_id: int, *, conn: Connection | None = None) -> Job:
    """The job with this id. Raises :class:`JobNotFound`."""
    return fetch_by_id(Job, JOB_GET, job_id, JobNotFound, conn)


def fetch_by_id(
    row_type: type[Row], statement: str, row_id: int, missing: Callable[[int], Exception], conn: Connection | None
) -> Row:
    """One row of ``row_type`` by primary key; raises ``missing(row_id)`` without one."""
    check_id(row_id)
    with connection(conn) as c, c.cursor(row_factory=class_row(row_type)) as cur:
        row = cur.execute(statement, {"id": row_id}).fetchone()
    if row is None:
        raise missing(row_id)
    return row


def list_jobs(
    *,
    status: str | None = None,
    type: str | None = None,
    queue: str | None = None,
    created_after: datetime | None = None,
    limit: int = DEFAULT_LIMIT,
    offset: int = 0,
    tag: str | None = None,
    ids: list[int] | None = None,
    created_before: datetime | None = None,
    error: str | None = None,
    schedule: str | None = None,
    cursor: str | None = None,
    before: int | None = None,
    capped: bool = False,
    conn: Connection | None = None,
) -> Page[Job]:
    """Jobs newest first (created_at, then id), filtered (:class:`jobq.jobs.filters.JobFilter`:
    every criterion given must hold), one page at a time.

    ``created_after`` and ``created_before`` are strict; without an offset they mean
    UTC. ``status`` may be any of the seven statuses. ``error`` is a substring of the
    last error, any case. The total is exact for the seed's criteria (status, type,
    queue, created_after); with any other, it is counted up to COUNT_LIMIT past
    ``offset`` and ``total_exact`` says whether it stopped there; ``capped`` counts so
    for the seed's type and created_after too (the dashboard, whose exact counts come
    from the counters, never counts a million rows for a page).

    Pages follow one another by ``offset``, or by keyset: ``cursor`` (a page's
    ``next_cursor``, opaque) starts after the last row of that page, ``before`` (a job
    id) after that job, and the page is read along the listing's index from there, as
    cheap a million rows deep as on top. The page's ``next_cursor`` is None on the last
    page. Rows added meanwhile are newer, so a walk by cursor sees each row that still
    matches once; its total is the whole filter's, as on the first page. A page and its
    total are read in one snapshot (the caller's transaction, if one is open): a job
    added meanwhile is in neither.

    Raises :class:`InvalidArgument` naming a bad filter, limit (1-500), offset (>= 0,
    and 0 with a cursor), cursor, or ``before`` (an absent job; with a cursor).
    """
    job_filter = parse_filter(
        {"status": status, "type": type, "queue": queue, "tag": tag, "ids": ids,
         "created_after": created_after, "created_before": created_before, "error": error, "schedule": schedule}
    )
    check_page(limit, offset)
    after = _start_after(cursor, before, offset)
    conditions, params = job_filter.conditions(), job_filter.params()
    exact, few = True, False
    with connection(conn) as c, _one_snapshot(c):
        if after is None and before is not None:
            after = (_created_at_of(c, before), before)
        if set(job_filter.given()) <= {"status", "queue"}:
            # The total is exact from the counters; it also bounds the scan: a page never
            # asks for more rows than exist (a rare status stops as soon as all are found,
            # one that has none is not searched at all).
            total = _total_from_counters(c, status=status, queue=queue)
            wanted = max(0, min(limit, total - offset))
        elif set(job_filter.given()) <= SEED_CRITERIA and not capped:
            counted = sql.SQL(JOB_LIST_COUNT).format(conditions=conditions)
            total = c.execute(counted, params).fetchone()[0]  # type: ignore[index]
            wanted = limit
        else:
            cap = min(offset + COUNT_LIMIT, MAX_ID - 1)  # cap + 1 must be a bigint
            counted = sql.SQL(JOB_LIST_COUNT_UP_TO).format(conditions=conditions)
            total = c.execute(counted, {**params, "cap": cap + 1}).fetchone()[0]  # type: ignore[index]
            exact, total = total <= cap, min(total, cap)
            wanted = max(0, min(limit, total - offset)) if exact else limit
            few = exact  # few rows match: take them by the filter's index, then sort (JOB_LIST_FEW)
        if after is not None:
            # One row more than the page shows tells whether another page follows.
            wanted = limit + 1 if total else 0
            conditions = sql.SQL(" AND ").join([conditions, sql.SQL(JOB_LIST_AFTER)])
            params = {**params, "after_created_at": after[0], "after_id": after[1]}
        query = sql.SQL(JOB_LIST_FEW if few else JOB_LIST_PAGE).format(conditions=conditions)
        items: list[Job] = []
        if wanted:
            with c.cursor(row_factory=class_row(Job)) as cur:
                page = {"limit": wanted, "offset": offset, "first": min(wanted + offset, MAX_ID)}
                items = cur.execute(query, {**params, **page}).fetchall()
    if after is not None:
        more, items = len(items) > limit, items[:limit]
    else:
        more = offset + len(items) < total if exact else len(items) == limit
    next_cursor = cursors.encode(items[-1].created_at, items[-1].id) if more and items else None
    return Page(items, int(total), limit, offset, exact, next_cursor)


@contextmanager
def _one_snapshot(conn: Connection) -> Iterator[None]:
    """The block's statements in one read-only snapshot (LISTING_SNAPSHOT): a
    transaction of their own when ``conn`` has none open, else the caller's as it is."""
    if conn.info.transaction_status != TransactionStatus.IDLE:
        yield
        return
    with conn.transaction():
        conn.execute(LISTING_SNAPSHOT)
        yield


def _start_after(cursor: str | None, before: int | None, offset: int) -> tuple[datetime, int] | None:
    """Where a keyset page starts: the cursor's row (None for ``before``, looked up later,
    or for a page by offset). Raises InvalidArgument for a bad combination."""
    if cursor is None and before is None:
        return None
    if cursor is not None and before is not None:
        raise InvalidArgument("before", "give cursor or before, not both")
    if offset:
        raise InvalidArgument("offset", "must be 0 with cursor or before (they say where the page starts)")
    if before is not None:
        check_id(before, "before")
        return None
    return cursors.decode(cursor)


def _created_at_of(conn: Connection, job_id: int) -> datetime:
    row = conn.execute(JOB_GET_CREATED_AT, {"id": job_id}).fetchone()
    if row is None:
        raise InvalidArgument("before", f"no job {job_id}: start after a job that exists")
    return row[0]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Counts:
    """Exact depth per status (all six, zeros included) and monotonic totals: overall,
    per queue and per type (``queues[q]`` and ``types[t]`` hold both kinds of names)."""

    depth: dict[str, int]
    totals: dict[str, int]
    queues: dict[str, dict[str, int]] = field(default_factory=dict)
    types: dict[str, dict[str, int]] = field(default_factory=dict)


def counts(*, conn: Connection | None = None) -> Counts:
    """Read the counters table (a few hundred rows, never a scan of jobs)."""
    depth = dict.fromkeys(STATUSES, 0)
    totals: dict[str, int] = defaultdict(int)
    per_queue: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATUSES, 0))
    per_type: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(STATUSES, 0))
    with connection(conn) as c:
        rows = c.execute(COUNTER_LIST).fetchall()
    for queue, job_type, name, n in rows:
        n = int(n)
        per_queue[queue][name] = per_queue[queue].get(name, 0) + n
        per_type[job_type][name] = per_type[job_type].get(name, 0) + n
        if name in depth:
            depth[name] += n
        else:
            totals[name] += n
    return Counts(depth, dict(totals), dict(per_queue), dict(per_type))


def check_id(value: Any, field_name: str = "id") -> None:
    """Raise InvalidArgument unless ``value`` is a positive 64-bit integer."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ID:
        raise InvalidArgument(field_name, "must be a positive 64-bit integer")


def check_page(limit: Any, offset: Any) -> None:
    """Raise InvalidArgument unless 1 <= limit <= 500 and 0 <= offset < 2**63."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_ID:
        raise InvalidArgument("offset", "must be a non-negative integer")


def _total_from_counters(conn: Connection, *, status: str | None, queue: str | None) -> int:
    per_queue = counts(conn=conn).queues
    chosen = [per_queue.get(queue, {})] if queue is not None else list(per_queue.values())
    names = [status] if status is not None else list(STATUSES)
    return sum(depths.get(name, 0) for depths in chosen for name in names)
