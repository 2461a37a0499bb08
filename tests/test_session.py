"""A worker's claim session across broken connections: reconnect, re-lock, retry."""

from __future__ import annotations

import threading

import psycopg
import pytest

import jobq
from support.claims import LOCK_BASE
from support.db import advisory_locks, scalar
from support.waiting import wait_for
from jobq.store.sql.ledger import JOB_GET
from jobq.jobs import leases
from jobq.daemon.worker.flight import InFlight
from jobq.daemon.worker.session import ClaimSession

pytestmark = [pytest.mark.db, pytest.mark.once]

WORKER = "host:1:session"
BACKENDS = "SELECT pid FROM pg_stat_activity WHERE application_name = 'jobq worker ' || %s AND datname = current_database()"


@pytest.fixture
def session(database_url, conn):
    """A claim session holding one claimed job in flight, and the job."""
    jobq.enqueue("noop", conn=conn)
    in_flight = InFlight()
    s = ClaimSession(
        database_url, worker_id=WORKER, lock_base=LOCK_BASE, stopping=threading.Event(), in_flight=in_flight
    )
    s.connect()
    claimed = s.run(lambda c, _: leases.claim(c, ["default"], worker_id=WORKER, limit=1, lock_base=LOCK_BASE).result())
    in_flight.hold(claimed)
    yield s, claimed[0]
    s.close()


def kill_backends(conn) -> None:
    """Terminate the session's backends and wait until they are gone (their locks too)."""
    pids = {pid for (pid,) in conn.execute(BACKENDS, (WORKER,))}
    for pid in pids:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    # (the session may already be connecting again: wait for these backends only)
    wait_for(lambda: not pids & {pid for (pid,) in conn.execute(BACKENDS, (WORKER,))}, 10, "the backends gone")


def in_background(call):
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # the test reads it
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def ping(conn, _retried) -> str:
    conn.execute("SELECT 1")  # finds the connection broken: reconnect, re-lock, call again
    return "ran"


def waiting_on_a_row_lock(conn) -> bool:
    return bool(scalar(conn, "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('tuple', 'transactionid') "
                             "AND pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database())"))


def test_a_relock_waits_for_an_uncommitted_release_and_never_locks_a_job_pending_again(session, conn, database_url):
    s, claim = session
    s.in_flight.start_next(lambda claim: 60.0)  # started: it keeps its place through a reconnect
    kill_backends(conn)
    with psycopg.connect(database_url) as recovering:  # maintenance releasing the job: unlocked, not committed
        recovering.execute("SELECT pg_advisory_lock(%s)", (LOCK_BASE | claim.job_id,))
        leases.release(recovering, [claim], lock_base=LOCK_BASE).result()
        thread, result = in_background(lambda: s.run(ping))
        wait_for(lambda: waiting_on_a_row_lock(conn), 10, "the re-lock waiting for the release to commit")
        recovering.commit()
    thread.join(10)
    assert result == {"value": "ran"}
    assert not s.in_flight.presented(claim).locked  # lost: it is pending again
    assert claim.job_id not in advisory_locks(conn)


def test_jobs_given_back_while_the_session_was_gone_are_let_go_not_run(session, conn, database_url):
    s, first = session
    jobq.enqueue("noop", conn=conn)
    second = s.run(lambda c, _: leases.claim(c, ["default"], worker_id=WORKER, limit=1, lock_base=LOCK_BASE).result())
    s.in_flight.hold(second)  # in line after the first
    kill_backends(conn)
    with psycopg.connect(database_url) as reaping:  # another host's stale reaper
        reaping.execute("SELECT pg_advisory_lock(%s)", (LOCK_BASE | second[0].job_id,))
        leases.release(reaping, second, lock_base=LOCK_BASE).result()
    assert s.run(ping) == "ran"
    assert [c.job_id for c in s.in_flight.held()] == [first.job_id]  # re-locked, still to run
    timeout = lambda claim: 60.0  # noqa: E731
    started = s.in_flight.start_next(timeout)
    assert started.claim == s.in_flight.presented(first)
    s.in_flight.finished()
    assert s.in_flight.start_next(timeout) is None
    assert jobq.get(second[0].job_id, conn=conn).status == "pending"  # someone else's to run


def test_a_connection_lost_while_relocking_is_retried_not_raised(session, conn, database_url):
    s, claim = session
    kill_backends(conn)
    with psycopg.connect(database_url) as blocker:  # holds the row: the re-lock waits on it
        blocker.execute(JOB_GET + " FOR UPDATE", {"id": claim.job_id})
        thread, result = in_background(lambda: s.run(ping))
        wait_for(lambda: waiting_on_a_row_lock(conn), 10, "the re-lock waiting")
        kill_backends(conn)  # the connection drops while it re-locks
        wait_for(lambda: waiting_on_a_row_lock(conn), 10, "the second re-lock waiting")
        blocker.rollback()
    thread.join(10)
    assert result == {"value": "ran"}
    assert s.in_flight.presented(claim).locked  # still ours: re-locked on the third connection
    assert claim.job_id in advisory_locks(conn)


def test_an_error_without_a_server_state_or_of_a_session_ended_by_the_server_is_a_lost_connection():
    from psycopg import errors

    from jobq.daemon.worker.session import connection_lost

    # psycopg's own "cannot exit pipeline mode while busy", raised when the backend was
    # terminated mid-pipeline before libpq noticed the connection's end: no SQLSTATE.
    assert connection_lost(psycopg.OperationalError("cannot exit pipeline mode while busy"))
    assert connection_lost(errors.AdminShutdown("terminating connection due to administrator command"))
    assert connection_lost(errors.ConnectionFailure("connection failure"))
    assert not connection_lost(errors.LockNotAvailable("could not obtain lock"))
    assert not connection_lost(errors.QueryCanceled("canceling statement due to statement timeout"))
    assert not connection_lost(errors.DiskFull("could not extend file"))
