"""jobq's ``search_path`` on a connection that is not jobq's own.

With ``JOBQ_SCHEMA`` set, the sessions jobq opens have ``search_path`` set to that schema
from their start (:mod:`jobq.store.options`). A connection an application hands in
(``jobq.enqueue(..., conn=conn)``, to enqueue inside its own transaction) has the
application's: for the length of jobq's statements it gets jobq's, and then its own
back, so that the application's next statements resolve names as before. Without
``JOBQ_SCHEMA`` nothing is sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from jobq.store.sql.database import SEARCH_PATH_RESTORE, SEARCH_PATH_SWAP


@contextlib.contextmanager
def jobqs(conn: psycopg.Connection[Any], schema: str | None) -> Iterator[None]:
    """``conn`` with ``search_path`` set to ``schema`` for the block (None: untouched).

    Two statements more (one before, one after). If the block leaves the transaction
    failed, the caller's rollback undoes the swap (a SET made in a transaction that is
    rolled back is undone), so nothing is sent then.
    """
    if schema is None:
        yield
        return
    row = conn.execute(SEARCH_PATH_SWAP, {"schema": schema}).fetchone()
    assert row is not None
    try:
        yield
    finally:
        if conn.info.transaction_status != TransactionStatus.INERROR and not conn.closed:
            conn.execute(SEARCH_PATH_RESTORE, {"previous": row[0]})
