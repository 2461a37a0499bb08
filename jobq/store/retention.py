"""Retention: finished jobs (done, dead, cancelled) older than JOBQ_RETENTION go, a
workflow with its last job, and dead letters older than JOBQ_DEAD_LETTER_RETENTION.

Finished jobs go a partition at a time (:func:`jobq.store.partitions.drop_before`): one
whose whole range is older than the retention is dropped, so a job is kept for the
retention rounded up to the partition interval. Those in the default partition (jobs
converted by schema 13, or finished while no partition covered the hour) are deleted
in short batches. The counters' totals are not touched. Dead letters stay until an
operator replays or discards them, unless their own retention is set.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import LiteralString

from jobq.store.sql.database import DATABASE_NOW
from jobq.store.sql.dead_letters import DEAD_LETTER_DELETE_DIED_BEFORE
from jobq.store.sql.partitions import JOB_DELETE_FINISHED_BEFORE
from jobq.store.sql.workflows import WORKFLOW_DELETE_WITHOUT_JOBS
from jobq.store import partitions
from jobq.store.connections import Connection

log = logging.getLogger(__name__)

BATCH = 1000


def prune(conn: Connection, older_than: float, *, batch: int = BATCH, budget: float | None = None) -> int:
    """Drop the partitions of jobs that finished more than ``older_than`` seconds ago,
    then delete such jobs left in the default partition, one short statement (one
    transaction, at most ``batch`` rows) at a time; stop when nothing is left or after
    ``budget`` seconds. ``conn`` must be in autocommit mode. Returns how many jobs went."""
    if not conn.autocommit:
        raise ValueError("prune needs an autocommit connection: each batch is its own transaction")
    (now,) = conn.execute(DATABASE_NOW).fetchone()  # type: ignore[misc]
    dropped = partitions.drop_before(conn, now - timedelta(seconds=older_than))
    if dropped:
        partitions.analyse_if_due(conn)
    params = {"older_than": older_than, "below": partitions.oldest_start(conn)}
    deleted = _in_batches(conn, JOB_DELETE_FINISHED_BEFORE, params, batch, budget)
    # A workflow goes with its last job.
    workflows = _in_batches(conn, WORKFLOW_DELETE_WITHOUT_JOBS, {"older_than": older_than}, batch, budget)
    if workflows:
        log.info("retention.pruned_workflows workflows=%s older_than=%ss", workflows, f"{older_than:g}")
    if dropped or deleted:
        log.info("retention.pruned jobs=%s dropped=%s deleted=%s older_than=%ss",
                 dropped + deleted, dropped, deleted, f"{older_than:g}")
    return dropped + deleted


def prune_dead_letters(conn: Connection, older_than: float, *, batch: int = BATCH, budget: float | None = None) -> int:
    """Delete dead letters (replayed or not) that died more than ``older_than`` seconds
    ago, in batches as :func:`prune` does. Returns how many went."""
    deleted = _in_batches(conn, DEAD_LETTER_DELETE_DIED_BEFORE, {"older_than": older_than}, batch, budget)
    if deleted:
        log.info("retention.pruned_dead_letters rows=%s older_than=%ss", deleted, f"{older_than:g}")
    return deleted


def _in_batches(conn: Connection, statement: LiteralString, params: dict, batch: int, budget: float | None) -> int:
    deadline = None if budget is None else time.monotonic() + budget
    deleted = 0
    while True:
        n = conn.execute(statement, {**params, "batch": batch}).rowcount
        deleted += n
        if n < batch or (deadline is not None and time.monotonic() >= deadline):
            return deleted



