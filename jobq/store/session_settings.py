"""A setting of a session for the length of jobq's statements, then the session's own back.

Two uses. With ``JOBQ_SCHEMA`` set, the sessions jobq opens have ``search_path`` set to
that schema from their start (:mod:`jobq.store.options`), but a connection an
application hands in (``jobq.enqueue(..., conn=conn)``, to enqueue inside its own
transaction) has the application's: it gets jobq's ``search_path`` for the length of
jobq's statements (:func:`jobq.store.connections.connection`). And an enqueue under an
OpenTelemetry span sets ``jobq.traceparent``, which the column ``jobs.traceparent``
takes as its default (migration 0018), for the length of its inserts
(:mod:`jobq.observe.tracing`): every way of inserting (INSERT, arrays, COPY) records it
without a column of its own in any statement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from jobq.store.sql.database import SESSION_SETTING_RESTORE, SESSION_SETTING_SWAP

SEARCH_PATH = "search_path"
TRACEPARENT = "jobq.traceparent"


@contextlib.contextmanager
def setting(conn: psycopg.Connection[Any], name: str, value: str | None) -> Iterator[None]:
    """``conn`` with setting ``name`` at ``value`` for the block (None: untouched, and
    nothing sent).

    Two statements more (one before, one after). If the block leaves the transaction
    failed, the caller's rollback undoes the change (a SET made in a transaction that is
    rolled back is undone), so nothing is sent then.
    """
    if value is None:
        yield
        return
    row = conn.execute(SESSION_SETTING_SWAP, {"name": name, "value": value}).fetchone()
    assert row is not None
    try:
        yield
    finally:
        if conn.info.transaction_status != TransactionStatus.INERROR and not conn.closed:
            conn.execute(SESSION_SETTING_RESTORE, {"name": name, "previous": row[0]})
