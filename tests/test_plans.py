"""The worker's statements take the right index whatever the statistics say: its
writes by id probe the primary key; and a jobs table never analysed is analysed by
the maintenance leader, so that the claim reads the backlog in claim order.

A queue's statistics are usually taken while few jobs are in flight; the planner then
believes the partial index of in-flight jobs is nearly empty and, for a batch's
outcome, would scan all of it (every job in flight and every entry left since the last
vacuum) and hash-join it with the batch. 8 workers drained 7,813 jobs a second that
way and 15,924 with one primary-key probe per job, which each statement here must be.
"""

import psycopg
import pytest

import jobq
from daemon import wait_for
from jobq import planning, queries
from jobq.migrate import migrate
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
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


@pytest.fixture
def unanalysed_backlog(empty_database):
    """A database of its own whose jobs table holds 50,000 pending jobs and has never
    been analysed (autovacuum off for it): the planner has only its guesses."""
    with psycopg.connect(empty_database, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = off)")
        for _ in range(50):
            jobq.enqueue_many([{"type": "noop"}] * 1000, conn=conn)
    return empty_database


def claim_plan(conn) -> str:
    params = {"queues": ["default"], "worker_id": "plans:1:x", "limit": 50, "lock_base": LOCK_BASE}
    return "\n".join(row[0] for row in conn.execute("EXPLAIN " + queries.JOB_CLAIM, params))


def test_a_jobs_table_never_analysed_is_analysed_once_and_the_claim_reads_in_claim_order(unanalysed_backlog):
    with psycopg.connect(unanalysed_backlog, autocommit=True) as conn:
        assert wait_for(lambda: planning.analyse_if_never(conn), 10, "the table seen unanalysed") == 1
        assert planning.analyse_if_never(conn) == 0  # once
        plan = claim_plan(conn)
    assert "jobs_pending_claim_idx" in plan, plan


def test_the_maintenance_leader_analyses_a_table_it_finds_without_statistics(unanalysed_backlog, daemon):
    with psycopg.connect(unanalysed_backlog, autocommit=True) as conn:
        daemon(1, url=unanalysed_backlog)
        wait_for(
            lambda: conn.execute("SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'jobs'").fetchone()[0],
            20, "jobs analysed by the leader",
        )
