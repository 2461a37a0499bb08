"""What the planner knows of the jobs table.

PostgreSQL plans from statistics that autovacuum gathers on its own schedule. The
partition of live jobs (jobs_live, schema 13) is all churn: a queue that drains
empties it, autovacuum may analyse it right then, and a backlog that arrives after is
unknown to the planner until its next look (a minute away at most by default, or
never where autovacuum is off); a table never analysed is planned on guesses too. Up
to schema 11, the guesses made the claim sort the whole backlog through a second index
of pending jobs (23 ms a claim with 50,000 waiting); schema 12 dropped that index, but
every other plan over jobs_live is still a guess. The maintenance leader looks every
few seconds, compares the planner's count with the exact counters, and analyses
jobs_live itself when the count is far short; so does a worker whose claims show it a
burst (:mod:`jobq.daemon.worker.backlog`), without waiting for the leader. The leader
looks at the workflow tables the same way (their count from the statistics system):
autovacuum may analyse them while a large workflow's enqueue is uncommitted.
"""

from __future__ import annotations

import logging

from psycopg import sql

from jobq.store.sql.statistics import (
    JOB_LIVE_ANALYZE,
    JOB_LIVE_STATISTICS_STALE,
    WORKFLOW_STATISTICS_STALE,
    WORKFLOW_TABLE_ANALYZE,
    WORKFLOW_TABLES,
)
from jobq.store.connections import Connection

log = logging.getLogger(__name__)

MIN_ROWS = 1000  # below this, any plan is fast
STALE_FACTOR = 10  # jobs live now, against the planner's count, that make it analyse


def analyse_if_stale(conn: Connection) -> int:
    """ANALYZE jobs_live (the partition of pending and in-flight jobs, which the claim
    reads) if it holds MIN_ROWS jobs or more and the planner believes in STALE_FACTOR
    times fewer (or was never told); 1 if it did, 0 if there was nothing to do."""
    row = conn.execute(JOB_LIVE_STATISTICS_STALE, {"min_rows": MIN_ROWS, "factor": STALE_FACTOR}).fetchone()
    if row is None or not row[0]:
        return 0
    conn.execute(JOB_LIVE_ANALYZE)
    log.info("planning.analysed table=jobs_live: its statistics were far short of the jobs in it")
    return 1


def analyse_workflows_if_stale(conn: Connection) -> int:
    """ANALYZE each of the workflow tables (jobs_waiting, the steps, the edges) that holds
    MIN_ROWS rows or more while the planner believes in STALE_FACTOR times fewer: a
    workflow enqueued while autovacuum analysed them leaves them planned as empty.
    Returns how many it analysed (SKIP_LOCKED: one autovacuum is working on is left to it)."""
    stale = [row[0] for row in conn.execute(
        WORKFLOW_STATISTICS_STALE, {"tables": list(WORKFLOW_TABLES), "min_rows": MIN_ROWS, "factor": STALE_FACTOR})]
    for table in stale:
        conn.execute(sql.SQL(WORKFLOW_TABLE_ANALYZE).format(table=sql.Identifier(table)))
        log.info("planning.analysed table=%s: its statistics were far short of the rows in it", table)
    return len(stale)
