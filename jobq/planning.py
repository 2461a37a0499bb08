"""What the planner knows of the jobs table.

PostgreSQL plans from statistics that autovacuum gathers on its own schedule. A jobs
table that has never been analysed (a new install that meets a backlog before
autovacuum's first pass, a minute away at most by default, or never where autovacuum
is off) is planned on guesses. Up to schema 11, the guesses made the claim sort the
whole backlog through a second index of pending jobs (23 ms a claim with 50,000
waiting); schema 12 dropped that index, but every other plan over jobs is still a
guess. The maintenance leader looks every few seconds and analyses such a table
itself; once it has statistics, autovacuum keeps them.
"""

from __future__ import annotations

import logging

from jobq import queries
from jobq.db import Connection

log = logging.getLogger(__name__)

MIN_ROWS = 1000  # below this, any plan is fast


def analyse_if_never(conn: Connection) -> int:
    """ANALYZE jobs_live (the partition of pending and in-flight jobs, which the claim
    reads) if it holds MIN_ROWS rows or more and was never analysed; 1 if it did, 0 if
    there was nothing to do."""
    row = conn.execute(queries.JOBS_UNANALYSED, {"min_rows": MIN_ROWS}).fetchone()
    if row is None or not row[0]:
        return 0
    conn.execute(queries.JOBS_LIVE_ANALYZE)
    log.info("planning.analysed table=jobs_live: it had no statistics yet")
    return 1
