import multiprocessing
import threading
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import jobq
from jobq.store.sql.leases import CLAIM_SESSION_PLANNER
from jobq.store.sql.queues import JOB_GET_OLDEST_DUE
from jobq.jobs import leases
from jobq.observe import tallies
from support.claims import LOCK_BASE, claim, claim_under_limits, complete, drain, fail
from support.db import advisory_locks

pytestmark = [pytest.mark.db, pytest.mark.once]


def future(seconds: float = 3600) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


def test_claim_takes_higher_priority_first(conn):
    for priority in (3, 9, 1, 5, 10):
        jobq.enqueue("noop", priority=priority, conn=conn)
    order = [claim(conn, 1)[0].job.priority for _ in range(5)]
    assert order == [10, 9, 5, 3, 1]


def test_priority_ties_break_by_run_at_then_id(conn):
    now = datetime.now(timezone.utc)
    later = jobq.enqueue("noop", run_at=now - timedelta(seconds=1), conn=conn)
    earlier = jobq.enqueue("noop", run_at=now - timedelta(seconds=2), conn=conn)
    same_a, same_b = jobq.enqueue_many([{"type": "noop"}, {"type": "noop"}], conn=conn)
    order = [c.job.id for c in claim(conn, 10)]
    assert order == [earlier.id, later.id, same_a.id, same_b.id]


def test_future_jobs_are_not_claimed(conn):
    jobq.enqueue("noop", run_at=future(), conn=conn)
    due = jobq.enqueue("noop", conn=conn)
    assert [c.job.id for c in claim(conn, 10)] == [due.id]
    assert claim(conn, 10) == []


def test_named_queues_isolate_claims(conn):
    mail = jobq.enqueue("noop", queue="mail", conn=conn)
    jobq.enqueue("noop", queue="reports", conn=conn)
    assert claim(conn, 10, queues=["default"]) == []
    assert [c.job.id for c in claim(conn, 10, queues=["mail"])] == [mail.id]


def test_a_claim_over_several_queues_merges_them_in_priority_order(conn):
    low = jobq.enqueue("noop", priority=2, queue="a", conn=conn)
    high = jobq.enqueue("noop", priority=8, queue="b", conn=conn)
    mid = jobq.enqueue("noop", priority=5, queue="a", conn=conn)
    assert [c.job.id for c in claim(conn, 2, queues=["a", "b"])] == [high.id, mid.id]
    assert [c.job.id for c in claim(conn, 2, queues=["a", "b"])] == [low.id]


def test_claim_sets_owner_lease_and_times(conn):
    jobq.enqueue("noop", conn=conn)
    (claimed,) = claim(conn, 1, worker_id="host:1")
    job = jobq.get(claimed.job.id, conn=conn)
    assert job.status == "claimed" and job.worker_id == "host:1" and job.lease == claimed.job.lease
    assert job.claimed_at is not None and job.heartbeat_at is not None and claimed.locked


def test_a_claimed_job_carries_its_errors_none_on_a_first_run_each_earlier_one_on_a_retry(conn):
    # The claims read empty errors as NULL (fragments.claimed_columns); the job a handler
    # gets says [] as the row does, and a retry's errors whole.
    first, retried = jobq.enqueue_many([{"type": "noop", "priority": 1}, {"type": "noop", "priority": 9}], conn=conn)
    fail(conn, claim(conn, 1), error="first failure")
    for take in (lambda: claim(conn, 10), lambda: claim_under_limits(conn, limit=10)):
        errors = {c.job.id: c.job.errors for c in take()}
        assert errors[first.id] == [] == jobq.get(first.id, conn=conn).errors
        assert [e["error"] for e in errors[retried.id]] == ["first failure"]
        assert errors[retried.id] == jobq.get(retried.id, conn=conn).errors
        conn.execute("UPDATE jobs SET status = 'pending', lease = NULL, worker_id = NULL")
        conn.execute("SELECT pg_advisory_unlock_all()")


def test_every_claim_gets_a_new_lease(conn):
    job = jobq.enqueue("noop", conn=conn)
    (first,) = claim(conn, 1)
    leases.release(conn, [first], lock_base=LOCK_BASE).result()
    (second,) = claim(conn, 1)
    assert second.job.id == job.id and second.job.lease != first.job.lease


def claim_in_session(url: str, rounds: int, batch: int) -> list[int]:
    ids = []
    with psycopg.connect(url, autocommit=True) as own:
        for _ in range(rounds):
            got = claim(own, batch)
            ids.extend(c.job.id for c in got)
            complete(own, got)
    return ids


def test_concurrent_threads_never_claim_the_same_job(conn, database_url):
    jobq.enqueue_many([{"type": "noop"}] * 2000, conn=conn)
    results: list[list[int]] = []
    threads = [
        threading.Thread(target=lambda: results.append(claim_in_session(database_url, 60, 5))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [job_id for ids in results for job_id in ids]
    assert len(claimed) == len(set(claimed)) == 2000


def test_concurrent_processes_never_claim_the_same_job(conn, database_url):
    jobq.enqueue_many([{"type": "noop"}] * 2000, conn=conn)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.starmap(claim_in_session, [(database_url, 120, 5)] * 4)
    claimed = [job_id for ids in results for job_id in ids]
    assert len(claimed) == len(set(claimed)) == 2000
    assert conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0] == 2000


def test_a_write_with_a_stale_lease_is_rejected_and_changes_nothing(conn):
    jobq.enqueue("noop", conn=conn)
    (stale,) = claim(conn, 1)
    leases.release(conn, [stale], lock_base=LOCK_BASE).result()
    (current,) = claim(conn, 1)
    before = jobq.get(current.job.id, conn=conn)

    assert complete(conn, [stale]) == {stale.job.id}
    assert fail(conn, [stale]) == ([], {stale.job.id})
    assert leases.release(conn, [stale], lock_base=LOCK_BASE).result() == {stale.job.id}
    assert leases.start(conn, [stale], [0.0]).result() == {stale.job.id}
    assert leases.heartbeat(conn, [stale]).result() == {stale.job.id}
    assert jobq.get(current.job.id, conn=conn) == before

    assert complete(conn, [current]) == set()
    assert jobq.get(current.job.id, conn=conn).status == "done"


def test_after_a_reconnect_a_recorded_outcome_is_told_from_a_stale_one(conn):
    jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)
    stale, in_flight = claim(conn, 2)
    leases.release(conn, [stale], lock_base=LOCK_BASE).result()
    (current,) = claim(conn, 1)
    complete(conn, [current])
    assert leases.finished_under_lease(conn, [stale, current, in_flight]) == {current.job.id}


def test_advisory_locks_are_held_only_for_claimed_jobs_until_their_outcome(conn):
    jobq.enqueue_many([{"type": "noop"}] * 10, conn=conn)
    got = claim(conn, 3)
    me = conn.info.backend_pid
    assert advisory_locks(conn) == {c.job.id: me for c in got}
    complete(conn, got[:2])
    assert advisory_locks(conn) == {got[2].job.id: me}
    fail(conn, got[2:])
    assert advisory_locks(conn) == {}


def test_an_applications_own_advisory_lock_on_the_job_id_does_not_block_the_job(conn, database_url):
    job = jobq.enqueue("noop", conn=conn)
    with psycopg.connect(database_url, autocommit=True) as app:
        app.execute("SELECT pg_advisory_lock(%s)", (job.id,))
        (claimed,) = claim(conn, 1)
        assert claimed.job.id == job.id and claimed.locked


def test_claim_leaves_no_lock_on_rows_it_did_not_return(conn):
    jobq.enqueue_many([{"type": "noop", "run_at": future()} for _ in range(10_000)], conn=conn)
    due = jobq.enqueue_many([{"type": "noop"}] * 3, conn=conn)
    with conn.transaction():  # hold the statement's locks open to look at them
        got = claim(conn, 2)
        me = conn.info.backend_pid
        rows = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'tuple'", (me,)
        ).fetchone()[0]
        assert set(advisory_locks(conn)) == {c.job.id for c in got}
        assert rows == 0
    assert {c.job.id for c in got} == {due[0].id, due[1].id}


def test_claim_uses_the_partial_pending_index(conn):
    jobq.enqueue_many([{"type": "noop", "queue": f"q{i % 20}"} for i in range(20_000)], conn=conn)
    conn.execute("UPDATE jobs SET status = 'done' WHERE id % 10 <> 0")
    conn.execute("ANALYZE jobs")
    plan = conn.execute(
        "EXPLAIN " + leases.claim_statement(10),
        {"queues": ["q3"], "worker_id": "w", "lock_base": LOCK_BASE, "hand_off": False},
    ).fetchall()
    text = "\n".join(row[0] for row in plan)
    assert "jobs_pending_claim_idx" in text, text


def test_a_claim_over_several_queues_reads_each_through_the_claim_index_in_claim_order(conn):
    """Where each queue holds about as many due jobs as a claim takes, the planner read
    each queue by a scan of the whole of jobs_live and a sort, once per queue (72 ms a
    claim of 1,000 over 20 queues of 1,000, against 33): schema 26's jobq_claim_candidates."""
    queues = [f"q{i}" for i in range(20)]
    jobs = jobq.enqueue_many([{"type": "noop", "queue": queues[i % 20], "priority": 1 + i % 3}
                              for i in range(20_000)], conn=conn)
    conn.execute("ANALYZE jobs")
    conn.execute(CLAIM_SESSION_PLANNER)  # as a worker's claim session
    # The session's scans not yet reported (those of its last second, too: read before and after).
    scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'jobs_live'"
    with conn.transaction(force_rollback=True):
        (before,) = conn.execute(scans).fetchone()
        claimed = leases.claim(conn, queues, worker_id="w", limit=1000, lock_base=LOCK_BASE).result()
        (after,) = conn.execute(scans).fetchone()
    first = sorted(jobs, key=lambda job: (-job.priority, job.run_at, job.id))[:1000]
    assert [c.job.id for c in claimed] == [job.id for job in first]  # the first 1,000 of all 20, in claim order
    assert after == before


def test_due_half_of_a_thousand_jobs_is_done_and_no_lock_is_left(conn):
    jobq.enqueue_many(
        [{"type": "noop", "run_at": future() if i % 2 else None} for i in range(1000)], conn=conn
    )
    assert drain(conn) == 500
    by_status = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    assert by_status == {"done": 500, "pending": 500}
    assert advisory_locks(conn) == {}


def test_the_next_due_the_oldest_due_and_the_scheduled_count_read_every_priority(conn):
    # The claim index is in run_at order only within a priority: each read takes the
    # earliest of one probe per priority, whichever priority holds it.
    now = datetime.now(timezone.utc)
    jobq.enqueue_many(
        [{"type": "noop", "priority": 10, "run_at": future(600)}, {"type": "noop", "priority": 1, "run_at": future(60)}]
        + [{"type": "noop", "priority": p, "run_at": future(900)} for p in range(2, 10)],
        conn=conn,
    )
    assert 50 < leases.next_run_in(conn, ["default"]).result() <= 60
    assert tallies.scheduled(["default", "other"], cap=100, conn=conn) == {"default": 10, "other": 0}
    assert tallies.scheduled(["default"], cap=3, conn=conn) == {"default": 4}  # "3+"
    oldest = jobq.enqueue("noop", priority=2, run_at=now - timedelta(seconds=30), conn=conn)
    jobq.enqueue("noop", priority=9, run_at=now - timedelta(seconds=10), conn=conn)
    assert leases.next_run_in(conn, ["default"]).result() <= -30
    (row,) = conn.execute(JOB_GET_OLDEST_DUE, {"queues": ["default"]}).fetchall()
    assert row[0] == oldest.id and row[4] >= 30
