"""The lock-aware reaper and the recovery of dead workers' jobs, driven directly."""

import threading

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from jobq.daemon import presence
from jobq.daemon.maintenance import reaper
from jobq.daemon import messages
from jobq.daemon.boards.finished import Failure, Finished
from jobq.settings import Settings
from support.claims import LOCK_BASE, claim
from support.db import advisory_locks
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.reaper]

SETTINGS = Settings.from_env({}, stale_threshold=30, backoff_base=0.1)


@pytest.fixture
def worker_session(database_url):
    """A second session playing a worker; the test may close it to play its death."""
    conn = psycopg.connect(database_url, autocommit=True)
    yield conn
    conn.close()


def end_session(session, observer) -> None:
    """Close a session and wait until its backend is gone (and its locks with it)."""
    pid = session.info.backend_pid
    session.close()
    wait_for(
        lambda: not observer.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone(),
        10, "the backend to exit",
    )


def age_heartbeats(conn, seconds: float = 60) -> None:
    conn.execute("UPDATE jobs SET heartbeat_at = now() - make_interval(secs => %s)", (seconds,))


def test_stale_jobs_of_a_live_session_are_never_reclaimed(conn, worker_session):
    jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)
    running, _ = claim(worker_session, 2)
    leases.start(worker_session, [running], [0.0]).result()
    age_heartbeats(conn)
    assert reaper.reap_stale(conn, SETTINGS, LOCK_BASE).changed == 0
    assert {job.status for job in jobq.list_jobs(conn=conn).items} == {"claimed", "running"}


def test_stale_jobs_of_a_gone_session_are_reclaimed_by_their_state(conn, worker_session):
    jobq.enqueue_many([{"type": "noop", "max_retries": 3}, {"type": "noop", "max_retries": 0}, {"type": "noop"}], conn=conn)
    first, second, third = claim(worker_session, 3)
    leases.start(worker_session, [first, second], [0.0, 0.0]).result()
    end_session(worker_session, conn)  # the worker's session ends: its advisory locks are gone
    age_heartbeats(conn)
    recovered = reaper.reap_stale(conn, SETTINGS, LOCK_BASE)
    assert (recovered.released, recovered.retried, recovered.dead) == (1, 1, 1)
    retried, dead, released = (jobq.get(c.job.id, conn=conn) for c in (first, second, third))
    assert (retried.status, retried.attempt, retried.error) == ("pending", 1, "worker lost")
    assert dead.status == "dead" and jobq.list_dead(conn=conn).items[0].original_id == dead.id
    assert (released.status, released.attempt, released.errors) == ("pending", 0, [])
    assert jobq.counts(conn=conn).totals["reclaimed_total"] == 3
    assert advisory_locks(conn) == {}


def test_fresh_heartbeats_are_left_alone_even_without_a_session(conn, worker_session):
    jobq.enqueue("noop", conn=conn)
    claim(worker_session, 1)
    end_session(worker_session, conn)
    assert reaper.reap_stale(conn, SETTINGS, LOCK_BASE).changed == 0


def test_stale_jobs_of_a_worker_its_supervisor_knows_alive_are_spared_until_it_is_gone(conn, worker_session):
    jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)
    claim(worker_session, 1, worker_id="host:1:cut")  # cut off from the database, alive
    claim(worker_session, 1, worker_id="host:2:lost")
    end_session(worker_session, conn)
    age_heartbeats(conn)
    recovered = reaper.reap_stale(conn, SETTINGS, LOCK_BASE, spared={"host:1:cut"})
    assert recovered.released == 1
    assert [(j.worker_id, j.status) for j in jobq.list_jobs(conn=conn, status="claimed").items] == [("host:1:cut", "claimed")]
    assert reaper.reap_stale(conn, SETTINGS, LOCK_BASE).released == 1  # no longer spared (its G came)
    assert advisory_locks(conn) == {}


def test_a_job_that_kills_every_worker_ends_in_the_dead_letter_table(conn, database_url):
    job = jobq.enqueue("noop", max_retries=2, conn=conn)
    for _ in range(3):
        conn.execute("UPDATE jobs SET run_at = now() WHERE id = %s", (job.id,))
        doomed = psycopg.connect(database_url, autocommit=True)
        leases.start(doomed, claim(doomed, 1), [0.0]).result()
        end_session(doomed, conn)
        age_heartbeats(conn)
        reaper.reap_stale(conn, SETTINGS, LOCK_BASE)
    row = jobq.get(job.id, conn=conn)
    assert row.status == "dead" and [e["error"] for e in row.errors] == ["worker lost"] * 3


@pytest.mark.parametrize(
    ("kind", "status", "error"),
    [("timeout", "pending", "timeout after 7 s"), ("crash", "pending", "worker process died while running this job (exit code 1)"),
     ("shutdown", "pending", None)],
)
def test_a_gone_workers_current_job_is_recovered_by_why_it_is_gone(conn, worker_session, kind, status, error):
    jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)
    current, queued = claim(worker_session, 2, worker_id="host:1:abc")
    leases.start(worker_session, [current], [0.0]).result()
    end_session(worker_session, conn)
    gone = messages.Gone("host:1:abc", current.job.id, current.lease, kind, 7, "exit code 1")
    recovered = reaper.recover_worker(conn, SETTINGS, LOCK_BASE, gone)
    assert recovered.busy == 0
    row = jobq.get(current.job.id, conn=conn)
    assert (row.status, row.error) == (status, error)
    assert row.attempt == (0 if kind == "shutdown" else 1)
    other = jobq.get(queued.job.id, conn=conn)
    assert (other.status, other.attempt) == ("pending", 0)  # claimed, never started: no attempt
    assert jobq.counts(conn=conn).totals.get("timeouts_total", 0) == (1 if kind == "timeout" else 0)


def test_the_jobs_a_gone_worker_had_finished_are_recorded_done_under_their_lease(conn, worker_session):
    jobq.enqueue_many([{"type": "noop"}] * 4, conn=conn)
    done, stale, current, queued = claim(worker_session, 4, worker_id="host:5:abc")
    end_session(worker_session, conn)
    finished = (Finished(done.job.id, done.lease, 0.25, '{"n": 1}'), Finished(stale.job.id, stale.lease + 1, 0.5, None))
    gone = messages.Gone("host:5:abc", current.job.id, current.lease, "crash", 7, "killed by signal 9", finished)
    recovered = reaper.recover_worker(conn, SETTINGS, LOCK_BASE, gone)
    assert (recovered.completed, recovered.released, recovered.retried, recovered.busy) == (1, 2, 1, 0)
    row = jobq.get(done.job.id, conn=conn)
    assert (row.status, row.attempt, row.result, row.errors) == ("done", 0, {"n": 1}, [])
    # a finished job under another lease is not this run's: released, as any claimed job
    assert (jobq.get(stale.job.id, conn=conn).status, jobq.get(queued.job.id, conn=conn).status) == ("pending", "pending")
    assert jobq.get(current.job.id, conn=conn).attempt == 1
    totals = jobq.counts(conn=conn).totals
    assert (totals["done_total"], totals["reclaimed_total"]) == (1, 3)
    assert advisory_locks(conn) == {}


def test_the_failures_and_snoozes_a_gone_worker_had_noted_are_recorded_as_it_would_have_under_their_lease(
    conn, worker_session
):
    """A failed run noted in the worker's finished area: its error, its delay and its
    handler's limit of retries are recorded as the worker's own write would have; and a
    snooze, with its delay."""
    jobq.enqueue_many([{"type": "noop", "max_retries": 3}] * 4, conn=conn)
    retried, dead, stale, snoozed = claim(worker_session, 4, worker_id="host:7:abc")
    end_session(worker_session, conn)
    finished = (
        Finished(retried.job.id, retried.lease, 0.25, None, Failure("ValueError: first", 60.0)),
        Finished(dead.job.id, dead.lease, 0.5, None, Failure("KeyError: 'k'", 1.0, max_retries=0, span="00-ab-cd-01")),
        Finished(stale.job.id, stale.lease + 1, 0.5, None, Failure("not this run's", 1.0)),
        Finished(snoozed.job.id, snoozed.lease, 0.1, None, snooze=120.0),
    )
    gone = messages.Gone("host:7:abc", 0, 0, "crash", 0, "killed by signal 9", finished)
    recovered = reaper.recover_worker(conn, SETTINGS, LOCK_BASE, gone)
    assert (recovered.completed, recovered.released, recovered.retried, recovered.dead, recovered.snoozed) == (
        0, 1, 1, 1, 1)
    row = jobq.get(snoozed.job.id, conn=conn)
    assert (row.status, row.attempt, row.snoozes) == ("pending", 0, 1)  # a snooze, no attempt
    assert 115 < (row.run_at - row.heartbeat_at).total_seconds() <= 121
    row = jobq.get(retried.job.id, conn=conn)
    assert (row.status, row.attempt, row.error) == ("pending", 1, "ValueError: first")
    assert 55 < (row.run_at - row.heartbeat_at).total_seconds() <= 61  # the noted delay, not the settings'
    row = jobq.get(dead.job.id, conn=conn)
    assert (row.status, row.attempt, row.error) == ("dead", 0, "KeyError: 'k'")  # the handler's limit of 0
    assert jobq.get(stale.job.id, conn=conn).status == "pending"  # another lease: released, no attempt
    assert jobq.get(stale.job.id, conn=conn).attempt == 0
    assert advisory_locks(conn) == {}


REFUSE_UPDATES = """
CREATE FUNCTION test_refuse_updates() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by test_refuse_updates'; END $$;
CREATE TRIGGER test_refuse_updates BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION test_refuse_updates();
"""


def test_a_recovery_whose_write_fails_lets_go_of_the_locks_it_took_and_succeeds_next_pass(conn, worker_session):
    jobq.enqueue_many([{"type": "noop"}] * 2, conn=conn)
    current, finished = claim(worker_session, 2, worker_id="host:6:abc")
    end_session(worker_session, conn)
    gone = messages.Gone("host:6:abc", current.job.id, current.lease, "crash", 7, "exit code 1",
                        (Finished(finished.job.id, finished.lease, 0.1, None),))
    conn.execute(REFUSE_UPDATES)
    try:
        for _ in range(2):  # each failed pass takes the locks and lets them go again
            with pytest.raises(psycopg.errors.RaiseException):
                reaper.recover_worker(conn, SETTINGS, LOCK_BASE, gone)
            assert advisory_locks(conn) == {}
    finally:
        conn.execute("DROP TRIGGER test_refuse_updates ON jobs; DROP FUNCTION test_refuse_updates()")
    recovered = reaper.recover_worker(conn, SETTINGS, LOCK_BASE, gone)
    assert (recovered.retried, recovered.completed) == (1, 1)
    assert advisory_locks(conn) == {}  # taken once, let go once: a lock taken twice would be left


def test_recovering_a_worker_whose_session_lives_touches_nothing(conn, worker_session):
    jobq.enqueue("noop", conn=conn)
    (current,) = claim(worker_session, 1, worker_id="host:2:abc")
    gone = messages.Gone("host:2:abc", current.job.id, current.lease, "crash", 0, "exit code 1")
    recovered = reaper.recover_worker(conn, SETTINGS, LOCK_BASE, gone)
    assert recovered.busy == 1 and recovered.changed == 0
    assert jobq.get(current.job.id, conn=conn).status == "claimed"


def test_rows_of_workers_whose_heartbeat_stopped_are_removed(conn):
    presence.register(conn, "host:3:old", "host", 3, ["default"])
    presence.register(conn, "host:4:new", "host", 4, ["default"])
    conn.execute("UPDATE workers SET heartbeat_at = now() - interval '1 hour' WHERE id = 'host:3:old'")
    assert presence.remove_stale(conn, 30) == ["host:3:old"]
    assert conn.execute("SELECT id FROM workers").fetchall() == [("host:4:new",)]


def test_a_job_finished_between_the_reapers_lock_and_its_write_is_not_counted_as_reclaimed(
    conn, worker_session, database_url
):
    job = jobq.enqueue("noop", conn=conn)
    claim(worker_session, 1, worker_id="host:5:abc")
    end_session(worker_session, conn)  # its lock is free
    age_heartbeats(conn)
    with psycopg.connect(database_url) as late:  # the job's outcome, written but not yet committed
        late.execute("UPDATE jobs SET status = 'done', completed_at = now() WHERE id = %s", (job.id,))
        result = {}
        reaping = threading.Thread(target=lambda: result.update(r=reaper.reap_stale(conn, SETTINGS, LOCK_BASE)))
        reaping.start()
        wait_for(lambda: conn_waiting_on_a_lock(late), 10, "the reaper's write waiting on the row")
        late.commit()
        reaping.join(10)
    assert result["r"].changed == 0 and result["r"].rejected == {job.id}
    assert jobq.counts(conn=conn).totals.get("reclaimed_total", 0) == 0
    assert jobq.get(job.id, conn=conn).status == "done"


def conn_waiting_on_a_lock(observer) -> bool:
    return bool(observer.execute(
        "SELECT count(*) FROM pg_locks WHERE NOT granted "
        "AND pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database())"
    ).fetchone()[0])
