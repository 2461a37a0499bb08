"""What a failed run leaves, through the leases as a worker writes it: the next attempt
after its delay, dead after max_retries + 1 runs, the dead letter copied with the
status change and only once; a handler's max_retries over the job's."""

import threading
from datetime import timedelta

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from jobq.handlers.backoff import retry_delay
from jobq.handlers.registry import register
from support.claims import LOCK_BASE, claim, drain, fail
from support.db import advisory_locks

pytestmark = [pytest.mark.db, pytest.mark.retry]


def db_now(conn):
    return conn.execute("SELECT now()").fetchone()[0]


def test_a_failure_with_retries_left_schedules_the_next_attempt(conn):
    job = jobq.enqueue("noop", max_retries=3, conn=conn)
    (claimed,) = claim(conn)
    before = db_now(conn)
    failures, rejected = fail(conn, [claimed], error="boom", delay=30)
    after = db_now(conn)
    assert rejected == set() and failures[0].status == "pending" and failures[0].attempt == 1
    row = jobq.get(job.id, conn=conn)
    assert (row.status, row.attempt, row.error) == ("pending", 1, "boom")
    assert before + timedelta(seconds=30) <= row.run_at <= after + timedelta(seconds=30)
    assert row.errors == [{"attempt": 0, "error": "boom", "worker_id": "test", "at": row.errors[0]["at"]}]
    assert claim(conn) == []  # not due before its delay


@pytest.mark.parametrize("attempt", [0, 1, 2])
def test_retry_timing_follows_the_backoff_formula_within_jitter(conn, attempt):
    job = jobq.enqueue("noop", max_retries=5, conn=conn)
    conn.execute("UPDATE jobs SET attempt = %s WHERE id = %s", (attempt, job.id))
    (claimed,) = claim(conn)
    delay = retry_delay(claimed.job.attempt, base=5, cap=3600, jitter=0.1)
    fail(conn, [claimed], delay=delay)
    scheduled = conn.execute(
        "SELECT extract(epoch FROM run_at - (errors -> -1 ->> 'at')::timestamptz) FROM jobs WHERE id = %s", (job.id,)
    ).fetchone()[0]
    nominal = 5 * 2**attempt
    assert nominal * 0.9 - 1e-3 <= float(scheduled) <= nominal * 1.1 + 1e-3


@pytest.mark.parametrize(("max_retries", "runs"), [(0, 1), (1, 2), (3, 4)])
def test_max_retries_n_means_n_plus_one_runs(conn, max_retries, runs):
    job = jobq.enqueue("always_fail", max_retries=max_retries, conn=conn)
    assert drain(conn) == runs
    row = jobq.get(job.id, conn=conn)
    assert row.status == "dead" and row.attempt == max_retries and len(row.errors) == runs
    assert row.completed_at is not None


def test_flaky_job_succeeds_on_its_third_run_and_keeps_its_history(conn):
    job = jobq.enqueue("flaky", conn=conn)
    assert drain(conn) == 3
    row = jobq.get(job.id, conn=conn)
    assert row.status == "done" and row.error is None
    assert row.result == {"ok": True, "succeeded_on_attempt": 2}
    assert [entry["attempt"] for entry in row.errors] == [0, 1]


@pytest.mark.dlq
def test_dead_letter_copy_is_complete(conn):
    job = jobq.enqueue("always_fail", {"order": 17}, priority=8, max_retries=1, queue="billing", conn=conn)
    drain(conn, queues=["billing"])
    (dead,) = jobq.list_dead(conn=conn).items
    row = jobq.get(job.id, conn=conn)
    assert (dead.original_id, dead.type, dead.queue, dead.payload, dead.priority, dead.max_retries) == (
        job.id, "always_fail", "billing", {"order": 17}, 8, 1,
    )
    assert dead.attempts == 2 and dead.errors == row.errors and dead.error == row.error
    assert "always_fail" in dead.error and dead.worker_id == "test"
    assert dead.replayed_at is None and dead.replayed_as is None


@pytest.mark.dlq
def test_dead_letter_copy_is_atomic_with_the_status_change(conn):
    job = jobq.enqueue("always_fail", max_retries=0, conn=conn)
    # Make the copy impossible: the dead-letter table refuses every row.
    conn.execute(
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'no'; END $$; "
        "CREATE TRIGGER test_refuse BEFORE INSERT ON dead_letter_jobs FOR EACH ROW EXECUTE FUNCTION test_refuse()"
    )
    try:
        (claimed,) = claim(conn)
        with pytest.raises(psycopg.errors.RaiseException):
            fail(conn, [claimed])
    finally:
        conn.execute("DROP TRIGGER test_refuse ON dead_letter_jobs; DROP FUNCTION test_refuse()")
    assert jobq.get(job.id, conn=conn).status == "claimed"  # the status change rolled back with it


@pytest.mark.dlq
def test_dead_letter_copy_is_never_duplicated_by_racing_writers(conn, database_url):
    job = jobq.enqueue("always_fail", max_retries=0, conn=conn)
    (claimed,) = claim(conn)
    outcomes = []
    barrier = threading.Barrier(4)

    def write():
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait()
            outcomes.append(fail(own, [leases.Claim(claimed.job, claimed.lease, False)]))

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorded = [failures for failures, rejected in outcomes if failures]
    assert len(recorded) == 1
    assert conn.execute("SELECT count(*) FROM dead_letter_jobs WHERE original_id = %s", (job.id,)).fetchone()[0] == 1
    leases.release(conn, [claimed], lock_base=LOCK_BASE).result()  # drop our advisory lock
    assert advisory_locks(conn) == {}


def test_a_handlers_max_retries_replaces_the_jobs(conn):
    @register("fails_once_allowed", max_retries=1)
    def fails(job):
        raise RuntimeError("no")

    job = jobq.enqueue("fails_once_allowed", max_retries=5, conn=conn)
    runs = 0
    while claimed := claim(conn):
        runs += 1
        leases.fail(
            conn, claimed, ["no"], [0.0], [0.0], max_retries=[1], lock_base=LOCK_BASE
        ).result()
    assert runs == 2 and jobq.get(job.id, conn=conn).status == "dead"


def test_unknown_type_is_retried_then_dead_lettered_naming_the_type(conn):
    job = jobq.enqueue("no_such_handler", max_retries=2, conn=conn)
    assert drain(conn) == 3
    (dead,) = jobq.list_dead(conn=conn).items
    assert dead.original_id == job.id and "'no_such_handler'" in dead.error
