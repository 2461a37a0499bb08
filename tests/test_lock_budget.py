"""A worker never holds more claimed jobs than its share of the server's lock table
(jobq.daemon.presence.lock_budget): each claimed job holds an advisory lock until its
outcome, and past the table every session of the server gets "out of shared memory"."""

from __future__ import annotations

import jobq
from jobq.daemon import presence
from support.waiting import wait_for


def lock_table(conn) -> int:
    return conn.execute(
        "SELECT current_setting('max_locks_per_transaction')::int * (current_setting('max_connections')::int "
        "+ current_setting('max_prepared_transactions')::int)"
    ).fetchone()[0]


def register_others(conn, n: int) -> None:
    """``n`` workers of other supervisors, alive for the test (a heartbeat an hour ahead:
    never removed as stale meanwhile)."""
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, queues, heartbeat_at) "
        "SELECT 'elsewhere:' || i, 'elsewhere', i, ARRAY['default'], now() + interval '1 hour' "
        "FROM generate_series(1, %s) AS i",
        (n,),
    )


def test_the_budget_is_half_the_lock_table_over_the_workers_registered(conn):
    table = lock_table(conn)
    assert presence.lock_budget(conn, "me") == table // 2  # itself, before it registers
    register_others(conn, 5)
    assert presence.lock_budget(conn, "me") == table // 2 // 6
    assert presence.lock_budget(conn, "elsewhere:1") == table // 2 // 5  # itself among them


def test_a_worker_claims_no_more_jobs_at_a_time_than_its_budget(ledger, daemon):
    conn = ledger
    table = lock_table(conn)
    others = table // 2 // 8  # a budget of 8 jobs a worker, whatever the server's lock table
    register_others(conn, others - 1)  # with the daemon's own worker: others in all
    budget = table // 2 // others
    assert 8 <= budget < 16
    jobs = jobq.enqueue_many([{"type": "ledger"}] * 300, conn=conn)
    daemon(1, JOBQ_CLAIM_BATCH="500")
    wait_for(lambda: conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0] == len(jobs),
             60, "every job done")
    # A claim is one transaction: its jobs share claimed_at (the transaction's now()).
    sizes = [n for (n,) in conn.execute("SELECT count(*) FROM jobs GROUP BY claimed_at")]
    assert sum(sizes) == 300 and max(sizes) == budget
