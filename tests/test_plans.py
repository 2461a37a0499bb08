"""The worker's statements take the right index whatever the statistics say: its
writes by id probe the primary key of the live partition, and read no other partition;
and a jobs table never analysed is analysed by the maintenance leader, so that the
claim reads the backlog in claim order.

A queue's statistics are usually taken while few jobs are in flight; the planner then
believes the partial index of in-flight jobs is nearly empty and, for a batch's
outcome, would scan all of it (every job in flight and every entry left since the last
vacuum) and hash-join it with the batch. 8 workers drained 7,813 jobs a second that
way and 15,924 with one primary-key probe per job, which each statement here must be.
"""

import re

import psycopg
import pytest

import jobq
from support.claims import LOCK_BASE, claim, complete
from support.waiting import wait_for
from jobq.store.sql import leases as lease_statements, outcomes as outcome_statements
from jobq.store.sql.leases import CLAIM_SESSION_PLANNER
from jobq.jobs import leases
from jobq.store import locks, statistics
from jobq.store.sql.database import LEADER_TRY_LOCK
from jobq.store.migrate import migrate
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE

pytestmark = [pytest.mark.db, pytest.mark.once]

INDEX_SCAN = re.compile(r"(?:Index Scan|Index Only Scan) using (\w+)|Bitmap Index Scan on (\w+)")

PLANS = "plans"  # the queue of this module's jobs

BY_ID = {  # every write of a leased job by id: each guards on its lease
    name: getattr(module, name)
    for module in (lease_statements, outcome_statements)
    for name in dir(module)
    if name.endswith("_IF_LEASED")
}


@pytest.fixture(scope="module")
def in_flight(database_url):
    """A table analysed while every job was pending, then churned: 4,000 jobs claimed
    and done, 400 in flight. In a queue of their own: a worker another test of this
    process left running (it serves 'default') cannot take them first."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs, job_counters")
        jobq.enqueue_many([{"type": "noop", "queue": PLANS}] * 5000, conn=conn)
        conn.execute("ANALYZE jobs")
        for _ in range(80):
            complete(conn, claim(conn, 50, queues=[PLANS]))
        held = [job for _ in range(8) for job in claim(conn, 50, queues=[PLANS])]
        assert len(held) == 400, f"the fixture claimed {len(held)} of its 400 jobs in flight"
        yield conn, held
        conn.execute("TRUNCATE jobs, job_counters")


def by_id_plan(conn, name: str, batch) -> str:
    """The plan of the write by id ``name`` (of BY_ID) for the claimed jobs ``batch``."""
    n = len(batch)
    params = {
        "ids": [c.job_id for c in batch], "leases": [c.lease for c in batch], "locked": [True] * n,
        "results": [None] * n, "elapsed": [0.0] * n, "errors": ["e"] * n, "delays": [1.0] * n,
        "max_retries": [None] * n, "spans": [None] * n, "lock_base": LOCK_BASE, "actor": "test", "progress": "{}",
        "id": batch[0].job_id, "lease": batch[0].lease,
    }
    return "\n".join(row[0] for row in conn.execute("EXPLAIN " + BY_ID[name], params))


@pytest.mark.parametrize("name", BY_ID)
def test_a_write_by_id_probes_the_primary_key(in_flight, name):
    conn, held = in_flight
    with conn.transaction():
        plan = by_id_plan(conn, name, held[:50])
    assert "jobs_live_pkey" in plan and "jobs_inflight_heartbeat_idx" not in plan, plan
    assert "jobs_finished" not in plan, plan  # pruned to jobs_live


def test_the_claim_reads_the_live_partition_only(in_flight):
    conn, _ = in_flight
    with conn.transaction():
        plan = claim_plan(conn, PLANS)
    assert "jobs_pending_claim_idx" in plan and "jobs_finished" not in plan, plan


def test_with_statistics_of_an_empty_live_partition_the_claim_and_writes_probe_the_primary_key(database_url):
    """Autovacuum running while jobs_live holds no row (a drain just ended) leaves it
    with reltuples = 0 and its pages still there, and a backlog that arrives next is
    unknown to the planner. It then found every index equally cheap, and served the
    writes by id from a listing index that has id among its columns, reading all of it
    once a write (556 ms a claim in a soak): schema 13's live listing indexes leave id
    out, and each write carries its ids as an index condition. And it served the claim
    by sorting every due job (47 ms a claim with 100,000 waiting): the claim session
    plans no bitmap scan (jobq.store.sql.leases.CLAIM_SESSION_PLANNER)."""
    with psycopg.connect(database_url, autocommit=True) as conn, \
            psycopg.connect(database_url, autocommit=True) as reader:
        conn.execute("TRUNCATE jobs, job_counters")
        jobq.enqueue_many([{"type": "noop"}] * 20_000, conn=conn)
        while claimed := claim(conn, 500):
            complete(conn, claimed)
        # A reader's lock keeps VACUUM from truncating the empty pages, as a busy
        # queue's sessions do.
        reader.execute("BEGIN; LOCK TABLE jobs_live IN ACCESS SHARE MODE")
        conn.execute("VACUUM ANALYZE jobs_live")  # as autovacuum does, on a drained queue
        reader.execute("COMMIT")
        tuples, pages = conn.execute(
            "SELECT reltuples, relpages FROM pg_class WHERE relname = 'jobs_live'"
        ).fetchone()
        assert tuples == 0 and pages > 0, (tuples, pages)
        for _ in range(100):  # a backlog the statistics do not know of
            jobq.enqueue_many([{"type": "noop"}] * 1000, conn=conn)
        conn.execute(CLAIM_SESSION_PLANNER)  # as a worker's claim session
        held = claim(conn, 50)
        with conn.transaction():
            plans = {"JOB_CLAIM": claim_plan(conn)}
            for name in BY_ID:
                plans[name] = by_id_plan(conn, name, held)
        conn.execute("TRUNCATE jobs, job_counters")
    # The claim reads the backlog in claim order: its locking step reads the claim index
    # itself, with no sort of every due job in between.
    claim_lines = plans["JOB_CLAIM"].splitlines()
    locking = next(i for i, line in enumerate(claim_lines) if "LockRows" in line)
    assert "Index Scan using jobs_pending_claim_idx" in claim_lines[locking + 1], plans["JOB_CLAIM"]
    for name, plan in plans.items():
        lines = plan.splitlines()
        assert not any("Seq Scan on jobs_live" in line for line in lines), (name, plan)
        index_scans = [(i, m[1] or m[2]) for i, line in enumerate(lines) if (m := INDEX_SCAN.search(line))]
        assert index_scans, (name, plan)
        for i, index in index_scans:  # probes by id (a job, a queue, the worker), or the claim's range: never a whole index
            assert index in ("jobs_live_pkey", "jobs_pending_claim_idx", "jobq_queues_pkey", "workers_pkey"), (name, plan)
            assert "Index Cond" in lines[i + 1], (name, plan)


@pytest.fixture
def unanalysed_backlog(empty_database):
    """A database of its own whose jobs table holds 50,000 pending jobs and has never
    been analysed (autovacuum off for it): the planner has only its guesses."""
    with psycopg.connect(empty_database, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        conn.execute("ALTER TABLE jobs_live SET (autovacuum_enabled = off)")
        for _ in range(50):
            jobq.enqueue_many([{"type": "noop"}] * 1000, conn=conn)
    return empty_database


def claim_plan(conn, queue: str = "default") -> str:
    params = {"queues": [queue], "worker_id": "plans:1:x", "lock_base": LOCK_BASE, "hand_off": False}
    return "\n".join(row[0] for row in conn.execute("EXPLAIN " + leases.claim_statement(50), params))


def test_a_jobs_table_never_analysed_is_analysed_once_and_the_claim_reads_in_claim_order(unanalysed_backlog):
    with psycopg.connect(unanalysed_backlog, autocommit=True) as conn:
        assert wait_for(lambda: statistics.analyse_if_stale(conn), 10, "the table seen unanalysed") == 1
        assert statistics.analyse_if_stale(conn) == 0  # once
        plan = claim_plan(conn)
    assert "jobs_pending_claim_idx" in plan, plan


def test_the_maintenance_leader_analyses_a_table_it_finds_without_statistics(unanalysed_backlog, daemon):
    with psycopg.connect(unanalysed_backlog, autocommit=True) as conn:
        daemon(1, url=unanalysed_backlog)
        wait_for(
            lambda: conn.execute(
                "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'jobs_live'"
            ).fetchone()[0],
            20, "jobs analysed by the leader",
        )


def test_statistics_taken_of_an_empty_live_partition_are_renewed_once_a_backlog_arrives(empty_database):
    with psycopg.connect(empty_database, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        conn.execute("ALTER TABLE jobs_live SET (autovacuum_enabled = off)")
        conn.execute("ANALYZE jobs_live")  # a drained queue, analysed: the planner counts 0
        assert statistics.analyse_if_stale(conn) == 0
        for _ in range(20):
            jobq.enqueue_many([{"type": "noop"}] * 1000, conn=conn)
        assert statistics.analyse_if_stale(conn) == 1
        assert statistics.analyse_if_stale(conn) == 0  # told: nothing more to do
        (counted,) = conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'jobs_live'").fetchone()
        assert counted == 20_000


def test_a_worker_that_meets_a_burst_has_the_live_partition_analysed_without_waiting_for_the_leader(
    empty_database, daemon
):
    """Statistics that say jobs_live is empty (a drained queue, analysed) planned a
    burst's claims and outcomes as nested loops over the batch: two workers drained
    about 9,000 jobs a second instead of 33,000 until the leader's next look, up to five
    seconds later. The first claim of 256 or more after a short one has a worker look.
    Here the test holds the leader's lock and autovacuum is off: nobody else analyses."""
    with psycopg.connect(empty_database, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        conn.execute("ALTER TABLE jobs_live SET (autovacuum_enabled = off)")
        conn.execute("ANALYZE jobs")  # analysed empty, as after a drain
        leader = locks.key(DEFAULT_ADVISORY_NAMESPACE, locks.MAINTENANCE_LEADER)
        assert conn.execute(LEADER_TRY_LOCK, {"key": leader}).fetchone()[0]
        daemon(2, url=empty_database)
        wait_for(lambda: conn.execute("SELECT count(*) FROM workers").fetchone()[0] == 2, 20, "two workers")
        jobq.enqueue_many([{"type": "noop"}] * 5000, conn=conn)
        wait_for(lambda: conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0] == 5000,
                 60, "the burst drained")
        (counted,) = conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'jobs_live'").fetchone()
    assert counted >= 1000, counted  # analysed while the burst was there


@pytest.mark.parametrize("size", [1, 50, 1000])
def test_a_claim_session_plans_each_claim_size_once_whatever_the_statistics_count(database_url, size):
    """With the claim size sent as a parameter, a generic plan was costed for a tenth of
    the rows the statistics count; once they counted a backlog, the plan cache planned
    every claim afresh (0.3 ms more a claim on the partitioned table). The size is in the
    statement's text; yet left to choose, PostgreSQL 16 planned every claim of 50 and of
    1,000 afresh in the benchmarks' database (its estimate of a plan for one queue under
    the generic one's), and here it plans the first five of any size. The claim session
    asks for the generic plan (CLAIM_SESSION_PLANNER): planned once, at its first
    prepared call."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs, job_counters")
        jobq.enqueue_many([{"type": "noop"}] * 20_000, conn=conn)
        conn.execute("ANALYZE jobs_live")  # the planner counts the backlog
        conn.execute(CLAIM_SESSION_PLANNER)  # as a worker's claim session
        for _ in range(15):
            complete(conn, claim(conn, size))
        (plans,) = conn.execute(
            "SELECT array_agg(ARRAY[generic_plans, custom_plans]) FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH open_queues%%UPDATE jobs%%'"
        ).fetchone()
        conn.execute("TRUNCATE jobs, job_counters")
    assert plans is not None and len(plans) == 1, plans  # one statement: this size
    assert plans[0] == [10, 0], plans  # prepared at the fifth call, planned once, never again
