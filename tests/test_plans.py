"""The worker's writes by id probe the primary key whatever the statistics say.

A queue's statistics are usually taken while few jobs are in flight; the planner then
believes the partial index of in-flight jobs is nearly empty and, for a batch's
outcome, would scan all of it (every job in flight and every entry left since the last
vacuum) and hash-join it with the batch. That took 8 workers from 13,700 to 7,800 jobs
a second; each statement here must be one primary-key probe per job instead.
"""

import psycopg
import pytest

import jobq
from jobq import queries
from support import LOCK_BASE, claim, complete

pytestmark = [pytest.mark.db, pytest.mark.once]

BY_ID = [
    "JOB_START_IF_LEASED", "JOB_HEARTBEAT_IF_LEASED", "JOB_COMPLETE_IF_LEASED", "JOB_FAIL_IF_LEASED",
    "JOB_RELEASE_IF_LEASED", "JOB_CANCEL_IF_LEASED", "JOB_SNOOZE_IF_LEASED", "JOB_RELOCK_IF_LEASED",
    "JOB_PROGRESS_SET_IF_LEASED",
]


@pytest.fixture(scope="module")
def in_flight(database_url):
    """A table analysed while every job was pending, then churned: 4,000 jobs claimed
    and done, 400 in flight."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs, job_counters")
        jobq.enqueue_many([{"type": "noop"}] * 5000, conn=conn)
        conn.execute("ANALYZE jobs")
        for _ in range(80):
            complete(conn, claim(conn, 50))
        held = [job for _ in range(8) for job in claim(conn, 50)]
        yield conn, held
        conn.execute("TRUNCATE jobs, job_counters")


@pytest.mark.parametrize("name", BY_ID)
def test_a_write_by_id_probes_the_primary_key(in_flight, name):
    conn, held = in_flight
    batch = held[:50]
    n = len(batch)
    params = {
        "ids": [c.job_id for c in batch], "leases": [c.lease for c in batch], "locked": [True] * n,
        "results": [None] * n, "elapsed": [0.0] * n, "errors": ["e"] * n, "delays": [1.0] * n,
        "max_retries": [None] * n, "lock_base": LOCK_BASE, "actor": "test", "progress": "{}",
        "id": batch[0].job_id, "lease": batch[0].lease,
    }
    with conn.transaction():
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + getattr(queries, name), params))
    assert "jobs_pkey" in plan and "jobs_inflight_heartbeat_idx" not in plan, plan
