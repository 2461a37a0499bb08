"""Hard timeouts, crashing handlers, and stopping the daemon with signals."""

import signal
import time

import pytest

import jobq
from support.daemon import alive, worker_pids
from support.db import scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon]


def finished(conn, job_id: int) -> jobq.Job | None:
    job = jobq.get(job_id, conn=conn)
    return job if job.status in ("done", "dead") else None


def test_a_handler_that_never_returns_is_killed_at_its_timeout(ledger, daemon):
    job = jobq.enqueue("hang", max_retries=0, conn=ledger)  # registered with timeout=1
    d = daemon(1, JOBQ_STALE_THRESHOLD="60")  # the reaper would take a minute
    started = time.monotonic()
    dead = wait_for(lambda: finished(ledger, job.id), 15, "the job failed by its timeout")
    assert time.monotonic() - started < 10
    assert dead.status == "dead" and dead.error == "timeout after 1 s"
    assert jobq.counts(conn=ledger).totals["timeouts_total"] == 1
    # the process the handler started died with its worker
    child = scalar(ledger, "SELECT lease FROM test_ledger WHERE job_id = %s", job.id)
    wait_for(lambda: not alive(child), 5, "the handler's own child process killed")
    wait_for(lambda: len(worker_pids(ledger)) == 1, 15, "a new worker in the slot")
    assert "job.timed_out" in d.log()


@pytest.mark.parametrize(("job_type", "cause"), [("exit_now", "exit code 1"), ("segfault", "signal 11 (SIGSEGV)")])
def test_a_handler_that_kills_its_worker_fails_its_job_clearly(conn, daemon, job_type, cause):
    job = jobq.enqueue(job_type, max_retries=1, conn=conn)
    daemon(1)
    dead = wait_for(lambda: finished(conn, job.id), 20, "the job dead-lettered")
    assert dead.status == "dead" and len(dead.errors) == 2
    assert all("worker process died while running this job" in e["error"] and cause in e["error"] for e in dead.errors)
    wait_for(lambda: len(worker_pids(conn)) == 1, 15, "a replacement worker")


def signal_during_a_long_job(conn, daemon, signum: int, *, seconds: float, grace: float):
    """One worker running a ledger_sleep job of ``seconds``, then ``signum`` to the
    supervisor; returns the job and the supervisor's exit code and time to exit."""
    job = jobq.enqueue("ledger_sleep", {"seconds": seconds}, conn=conn)
    d = daemon(1, JOBQ_GRACEFUL_TIMEOUT=str(grace))
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "running", 15, "the long job running")
    sent = time.monotonic()
    d.signal(signum)
    if signum == signal.SIGTERM:
        d.signal(signum)  # a second TERM stays graceful
    code = d.wait(15)
    return job, code, time.monotonic() - sent


def test_term_lets_a_running_job_finish_within_the_grace_time(ledger, daemon):
    queued = jobq.enqueue_many([{"type": "noop", "priority": 1}] * 3, conn=ledger)
    job, code, took = signal_during_a_long_job(ledger, daemon, signal.SIGTERM, seconds=1.5, grace=10)
    assert code == 0 and took < 10
    assert jobq.get(job.id, conn=ledger).status == "done"
    assert {jobq.get(q.id, conn=ledger).status for q in queued} == {"pending"}
    assert {jobq.get(q.id, conn=ledger).attempt for q in queued} == {0}


def test_term_returns_a_job_that_outlives_the_grace_time_to_pending(ledger, daemon):
    job, code, took = signal_during_a_long_job(ledger, daemon, signal.SIGTERM, seconds=60, grace=1)
    assert code == 0 and took < 1 + 4  # the grace time plus a small margin
    row = jobq.get(job.id, conn=ledger)
    assert (row.status, row.attempt, row.errors) == ("pending", 0, [])


def test_quit_stops_at_once_and_the_job_comes_back(ledger, daemon):
    job, code, took = signal_during_a_long_job(ledger, daemon, signal.SIGQUIT, seconds=60, grace=30)
    assert code == 0 and took < 5
    wait_for(lambda: jobq.get(job.id, conn=ledger).status == "pending", 10, "the job back to pending")
    assert jobq.get(job.id, conn=ledger).attempt == 0
