"""Debounced enqueues: ``enqueue(..., idempotency_key=k, debounce=30, debounce_max_wait=300)``.

While a job holding ``k`` is still pending, an enqueue replaces its payload and moves
its run_at to ``debounce`` seconds from now, never past ``debounce_max_wait`` seconds
after that job's first enqueue, and returns it (not created: HTTP 200). Once it is
claimed, its key is free (a debounced job's key is held while pending only), and an
enqueue adds a new job. Times are the database's.
"""

from __future__ import annotations

from typing import Any

from psycopg.rows import class_row

from jobq.job import Job
from jobq.store.connections import Connection
from jobq.store.sql.enqueue import JOB_DEBOUNCE_IF_PENDING, JOB_GET_KEY_HOLDERS, JOB_INSERT_DEBOUNCED

# A key whose pending job is claimed, or inserted by another caller, between this
# caller's statements is tried again, this many times at most.
ATTEMPTS = 10


def insert_debounced(
    conn: Connection, params: dict[str, Any], debounce: float, max_wait: float | None, scope: str = "pending"
) -> tuple[Job, bool] | None:
    """The job for a debounced enqueue of ``params`` (a single job's insert parameters,
    with its idempotency key): the pending job holding the key, moved, or a new job;
    and whether it is new. A key held by a job of another scope ('always', 'active')
    returns that job, untouched, as any enqueue that meets a held key. ``scope`` is the
    spec's (``JobSpec.key_scope``: "pending"). None when the
    key changed hands ATTEMPTS times during the call. The caller commits."""
    params = {**params, "unique_while": scope, "debounce": debounce, "max_wait": max_wait}
    with conn.cursor(row_factory=class_row(Job)) as cur:
        for _ in range(ATTEMPTS):
            job = cur.execute(JOB_DEBOUNCE_IF_PENDING, params).fetchone()
            if job is not None:
                return job, False
            job = cur.execute(JOB_INSERT_DEBOUNCED, params).fetchone()
            if job is not None:
                return job, True
            holder = cur.execute(JOB_GET_KEY_HOLDERS, {"keys": [params["idempotency_key"]]}).fetchone()
            if holder is not None and holder.unique_while != "pending":
                return holder, False
    return None
