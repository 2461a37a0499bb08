"""What a test's code enqueued: :func:`enqueued_jobs` and :func:`assert_enqueued`, read
from the ledger (the default connection, which ``jobq_database`` points at the test's
database, or ``conn``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobq.job import Job
from jobq.jobs.ledger import MAX_LIMIT, list_jobs
from jobq.store.connections import Connection

_ANY = object()


def enqueued_jobs(
    type: str | None = None, *, queue: str | None = None, status: str | None = None, conn: Connection | None = None
) -> list[Job]:
    """Every job of ``type`` in ``queue`` with ``status`` (None: any), oldest first."""
    jobs: list[Job] = []
    cursor = None
    while True:
        page = list_jobs(type=type, queue=queue, status=status, limit=MAX_LIMIT, cursor=cursor, conn=conn)
        jobs.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return jobs[::-1]


def assert_enqueued(
    type: str | None = None,
    payload: Mapping[str, Any] | object = _ANY,
    queue: str | None = None,
    *,
    count: int | None = None,
    conn: Connection | None = None,
) -> Job:
    """Assert that a job of ``type`` with exactly ``payload`` (when given) was enqueued in
    ``queue`` (when given), ``count`` times (when given; else at least once); return the
    latest such job. The AssertionError lists what was enqueued instead."""
    candidates = enqueued_jobs(type, queue=queue, conn=conn)
    matching = [job for job in candidates if payload is _ANY or job.payload == payload]
    if (count is None and not matching) or (count is not None and len(matching) != count):
        wanted = {k: v for k, v in {"type": type, "queue": queue}.items() if v is not None}
        if payload is not _ANY:
            wanted["payload"] = payload
        seen = [{"id": j.id, "type": j.type, "queue": j.queue, "payload": j.payload} for j in enqueued_jobs(conn=conn)]
        times = f"{count} time(s)" if count is not None else "at least once"
        raise AssertionError(f"expected a job {wanted} enqueued {times}, found {len(matching)}; enqueued: {seen}")
    return matching[-1]
