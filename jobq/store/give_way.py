"""A transaction that gives way to the traffic whose locks it needs.

PostgreSQL queues a lock request behind the transactions that hold the lock, and every
later request behind it: DDL waiting for a long transaction on ``jobs`` stops every
claim and completion until that transaction ends. :func:`giving_way` runs its work with
a short ``lock_timeout`` instead; when a lock is not had in time (or the server breaks a
deadlock by aborting this side), the work rolls back, the traffic queued behind it goes
through in a pause, and the work is tried again, until a bound in seconds has passed.

Used by ``jobq migrate`` (each file), partition maintenance (the lock a drop takes on
``jobs_finished``) and the tests' DDL beside a live daemon.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from psycopg import errors

from jobq.store.connections import Connection
from jobq.store.sql.partitions import LOCK_TIMEOUT_SET

T = TypeVar("T")

# What a try that gave way raises: its lock was not had in time, or it was the side of a
# deadlock the server aborted.
GAVE_WAY = (errors.LockNotAvailable, errors.DeadlockDetected)


def giving_way(conn: Connection, work: Callable[[], T], *, wait_ms: int | None, pause: float, within: float,
               gave_way: tuple[type[Exception], ...] = GAVE_WAY,
               on_giving_way: Callable[[Exception], None] | None = None) -> T:
    """Return ``work()``, run in a transaction of ``conn`` (a savepoint when one is open)
    whose statements wait at most ``wait_ms`` for each lock (None: the session's own
    setting). A try that raises one of ``gave_way`` is rolled back, reported to
    ``on_giving_way`` and tried again ``pause`` seconds later; the try that would end
    past ``within`` seconds from the first raises its error instead."""
    deadline = time.monotonic() + within
    while True:
        try:
            with conn.transaction():
                if wait_ms is not None:
                    conn.execute(LOCK_TIMEOUT_SET, {"ms": str(wait_ms)})
                return work()
        except gave_way as exc:
            if time.monotonic() + pause > deadline:
                raise
            if on_giving_way is not None:
                on_giving_way(exc)
            time.sleep(pause)
