"""Retention: deleting finished jobs (done and dead) older than a cut-off, in small
batches. Dead-letter rows are not touched: they stay until an operator replays or
discards them. The counters' totals are not touched either."""

from __future__ import annotations

import logging
import time

from jobq import queries
from jobq.db import Connection

log = logging.getLogger(__name__)

BATCH = 1000


def prune(conn: Connection, older_than: float, *, batch: int = BATCH, budget: float | None = None) -> int:
    """Delete done and dead jobs that finished more than ``older_than`` seconds ago, one
    short statement (one transaction, at most ``batch`` rows) at a time; stop when
    nothing is left or after ``budget`` seconds. ``conn`` must be in autocommit mode.
    Returns how many rows were deleted."""
    if not conn.autocommit:
        raise ValueError("prune needs an autocommit connection: each batch is its own transaction")
    deadline = None if budget is None else time.monotonic() + budget
    deleted = 0
    while True:
        n = conn.execute(queries.JOB_DELETE_FINISHED_BEFORE, {"older_than": older_than, "batch": batch}).rowcount
        deleted += n
        if n < batch or (deadline is not None and time.monotonic() >= deadline):
            break
    if deleted:
        log.info("retention.pruned jobs=%s older_than=%ss", deleted, f"{older_than:g}")
    return deleted
