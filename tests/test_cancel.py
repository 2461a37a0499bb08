"""Cancelling jobs: pending and claimed ones at once, running ones in their handler or,
past the grace, by killing their worker; and progress reported from a handler. Against
the real daemon: the cancel travels NOTIFY -> maintenance -> supervisor -> worker."""

import signal
import time

import psycopg
import pytest

import jobq
from support.daemon import worker_pids
from support.db import THIS_DATABASE_LOCKS, scalar
from support.waiting import wait_for
from jobq.jobs import leases, queues
from jobq.errors import JobNotCancellable

pytestmark = [pytest.mark.db, pytest.mark.control]

GRACE = "1"


def status(conn, job_id: int) -> str:
    return jobq.get(job_id, conn=conn).status


def running(conn, job_id: int) -> None:
    """Wait until the job's handler has been running a while (its worker marks it running
    after 50 ms)."""
    wait_for(lambda: status(conn, job_id) == "running", 15, f"job {job_id} running")


def test_a_pending_job_is_cancelled_at_once_and_never_runs(ledger, daemon):
    job = jobq.enqueue("ledger", run_at="2099-01-01T00:00:00Z", conn=ledger)
    cancelled = jobq.cancel(job.id, actor="tester", conn=ledger)
    assert (cancelled.status, cancelled.cancelled_by) == ("cancelled", "tester")
    assert cancelled.completed_at is not None
    with pytest.raises(JobNotCancellable) as refused:
        jobq.cancel(job.id, conn=ledger)
    assert refused.value.status == "cancelled"
    counts = jobq.counts(conn=ledger)
    assert counts.depth["cancelled"] == 1 and counts.depth["pending"] == 0


def test_a_cpu_bound_handler_gets_cancelled_raised_within_a_second(ledger, daemon):
    job = jobq.enqueue("spin", conn=ledger)
    d = daemon(1, JOBQ_CANCEL_GRACE="30")
    running(ledger, job.id)
    pids = worker_pids(ledger)
    asked = time.monotonic()
    jobq.cancel(job.id, conn=ledger)
    wait_for(lambda: "job.cancelled id=%d" % job.id in d.log(), 10, "the handler stopped by Cancelled")
    assert time.monotonic() - asked < 1  # about 55 ms on this machine
    done = jobq.get(job.id, conn=ledger)
    assert done.status == "cancelled" and done.attempt == 0 and done.error is None
    assert worker_pids(ledger) == pids  # the same worker goes on: nothing was killed
    totals = jobq.counts(conn=ledger).totals
    assert totals.get("timeouts_total", 0) == 0 and totals.get("failed_runs_total", 0) == 0
    assert scalar(ledger, "SELECT count(*) FROM dead_letter_jobs") == 0


def test_a_handler_inside_c_code_is_killed_after_the_grace_and_its_slot_refilled(ledger, daemon):
    job = jobq.enqueue("busy_in_c", max_retries=3, conn=ledger)
    after = jobq.enqueue("ledger", conn=ledger)
    d = daemon(1, JOBQ_CANCEL_GRACE=GRACE)
    wait_for(lambda: status(ledger, job.id) in ("claimed", "running"), 15, "the C call running")
    time.sleep(0.3)
    (pid,) = worker_pids(ledger)
    asked = time.monotonic()
    jobq.cancel(job.id, conn=ledger)
    wait_for(lambda: pid not in worker_pids(ledger), float(GRACE) + 10, "the worker killed")
    assert time.monotonic() - asked < float(GRACE) + 2  # about grace + 0.05 s on this machine
    wait_for(lambda: status(ledger, after.id) == "done", 15, "the next job done by a new worker")
    assert len(worker_pids(ledger)) == 1 and pid not in worker_pids(ledger)
    done = jobq.get(job.id, conn=ledger)
    assert (done.status, done.attempt, done.error) == ("cancelled", 0, None)
    assert "job.cancel_killed" in d.log()
    totals = jobq.counts(conn=ledger).totals
    assert totals.get("timeouts_total", 0) == 0 and totals.get("failed_runs_total", 0) == 0


def test_a_handler_that_catches_cancelled_cleans_up_and_is_not_killed(ledger, daemon):
    job = jobq.enqueue("cancel_cleanup", conn=ledger)
    d = daemon(1, JOBQ_CANCEL_GRACE="30")
    running(ledger, job.id)
    (pid,) = worker_pids(ledger)
    jobq.cancel(job.id, conn=ledger)
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE job_id = %s", job.id) == 1, 10,
             "the handler's cleanup")
    wait_for(lambda: "job.cancelled id=%d" % job.id in d.log(), 10, "the run recorded as cancelled")
    assert worker_pids(ledger) == [pid] and "job.cancel_killed" not in d.log()
    assert status(ledger, job.id) == "cancelled"


def test_a_stopped_handlers_cleanup_is_not_interrupted_by_the_next_control_signal(ledger, daemon):
    """Cancelled is raised in a handler once. Its lease taken away (as by another host's
    reaper), the lifeline stops it; a pause of another queue, passed on to every worker
    that runs a job with the same signal, arrives during its cleanup and must not raise
    Cancelled a second time there (it did: the cleanup was cut short)."""
    job = jobq.enqueue("cancel_cleanup", {"cleanup": 1.5}, conn=ledger)
    d = daemon(1, JOBQ_CANCEL_GRACE="30")
    running(ledger, job.id)
    ledger.execute("UPDATE jobs SET lease = lease + 1000 WHERE id = %s", (job.id,))
    wait_for(lambda: "job.stopped id=%d" % job.id in d.log(), 10, "the handler stopped by its worker's lifeline")
    queues.pause("elsewhere", conn=ledger)
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE job_id = %s", job.id) == 1, 10,
             "the handler's whole cleanup")
    wait_for(lambda: "job.stale_lease_rejected id=%d" % job.id in d.log(), 10, "the stopped run's outcome refused")
    assert "job.stop_killed" not in d.log()


def test_a_handler_that_raises_cancelled_itself_cancels_its_job(ledger, daemon):
    job = jobq.enqueue("cancels_itself", conn=ledger)
    daemon(1)
    wait_for(lambda: status(ledger, job.id) == "cancelled", 15, "the job cancelled by its handler")
    assert jobq.get(job.id, conn=ledger).cancelled_by.startswith("worker:")


def test_a_cancel_racing_the_jobs_completion_leaves_one_outcome(ledger, daemon):
    daemon(2)
    outcomes = []
    for _ in range(20):
        job = jobq.enqueue("ledger", conn=ledger)
        time.sleep(0.005)
        try:
            jobq.cancel(job.id, conn=ledger)
        except JobNotCancellable:
            pass
        final = wait_for(lambda: jobq.get(job.id, conn=ledger) if status(ledger, job.id) in ("done", "cancelled") else None,
                         15, "an outcome")
        ran = scalar(ledger, "SELECT count(*) FROM test_ledger WHERE job_id = %s", job.id)
        outcomes.append((final.status, ran))
        assert final.status in ("done", "cancelled")
        if final.status == "done":
            assert ran == 1 and final.cancelled_by is None
        else:
            assert final.result is None and final.cancelled_by is not None
    time.sleep(0.3)
    rows = ledger.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall()
    assert dict(rows).keys() <= {"done", "cancelled"} and sum(n for _, n in rows) == 20


def test_a_cancel_during_a_graceful_shutdown_ends_the_job_cancelled(ledger, daemon):
    job = jobq.enqueue("spin", conn=ledger)
    d = daemon(1, JOBQ_GRACEFUL_TIMEOUT="30", JOBQ_CANCEL_GRACE="30")
    running(ledger, job.id)
    d.signal(signal.SIGTERM)
    time.sleep(0.2)
    jobq.cancel(job.id, conn=ledger)
    assert d.wait(15) == 0
    done = jobq.get(job.id, conn=ledger)
    assert (done.status, done.attempt) == ("cancelled", 0)


def test_the_reaper_leaves_a_cancelled_job_alone(ledger):
    job = jobq.enqueue("ledger", conn=ledger)
    with psycopg.connect(ledger.info.dsn, autocommit=True) as worker_conn:
        (held,) = leases.claim(worker_conn, ["default"], worker_id="test:1:x", limit=1, lock_base=0).result()
    # The worker's session is gone (its lock with it): the reaper could take the job now.
    jobq.cancel(held.job_id, conn=ledger)
    ledger.execute("UPDATE jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s", (job.id,))
    from jobq.daemon.maintenance import reaper
    from jobq.settings import Settings

    recovered = reaper.reap_stale(ledger, Settings.from_env({}), 0)
    assert recovered.changed == 0 and status(ledger, job.id) == "cancelled"
    # A late outcome of the old run is a stale write: rejected, the job stays cancelled.
    with psycopg.connect(ledger.info.dsn, autocommit=True) as late:
        rejected = leases.complete(late, [held], ["{}"], [0.1], lock_base=0).result()
    assert rejected == {job.id} and status(ledger, job.id) == "cancelled"


def test_progress_shows_while_a_cpu_bound_handler_runs(ledger, daemon):
    job = jobq.enqueue("progress_steps", {"steps": 4, "step_seconds": 0.6, "linger": 0}, conn=ledger)
    daemon(1, JOBQ_HEARTBEAT_INTERVAL="30", JOBQ_STALE_THRESHOLD="60")  # progress does not wait for the heartbeat
    seen = wait_for(lambda: (jobq.get(job.id, conn=ledger).progress or {}).get("fraction"), 10, "first progress")
    assert 0 < seen < 1
    current = jobq.get(job.id, conn=ledger)
    assert current.status == "running" and current.progress["message"].startswith("step ")
    assert current.progress["data"]["step"] >= 1 and current.progress["at"]


def test_progress_arguments_are_checked_and_ignored_outside_a_handler():
    jobq.progress(0.5, "outside a handler: nothing to do")
    assert jobq.cancel_requested() is False
    for bad in ({"fraction": 1.5}, {"fraction": float("nan")}, {"message": 7}, {"blob": object()}):
        with pytest.raises(jobq.InvalidArgument):
            jobq.progress(**bad)


def test_a_job_cancelled_before_its_handler_starts_is_not_run():
    from jobq.daemon.worker.flight import InFlight
    from jobq.handlers import execution
    from jobq.handlers.registry import Handler

    calls = []
    handler = Handler("t", lambda job: calls.append(job.id))
    job = type("J", (), {"id": 41, "type": "t", "workflow_id": None})()
    in_flight = InFlight()  # the worker's jobs in flight, where cancels are heard
    in_flight.hold([leases.Claim(job, 410, True)])  # type: ignore[arg-type]
    in_flight.request_cancel(41)  # the cancel arrived while it waited in the batch
    assert in_flight.was_cancelled(41) and not in_flight.was_cancelled(42)
    started = in_flight.start_next(lambda claim: 60.0)  # (past the withdrawal: it raced it)
    result = execution.run(job, handler, started.run)
    in_flight.finished()
    in_flight.batch_over()
    assert result.cancelled and calls == []
    assert execution.run(job, handler).ok and calls == [41]  # forgotten with its batch


def test_inspect_shows_the_progress_of_each_workers_job(ledger):
    from jobq.observe import inspection
    from jobq.cli import inspect_view
    from jobq.daemon import presence

    job = jobq.enqueue("noop", conn=ledger)
    ledger.execute("UPDATE jobs SET progress = %s WHERE id = %s",
                   ('{"fraction": 0.45, "message": "step 2 of 4", "data": {}, "at": "2026-01-01T00:00:00+00:00"}', job.id))
    presence.register(ledger, "host:9:abc", "host", 9, ["default"])
    presence.beat(ledger, "host:9:abc", job.id, 0)
    (worker,) = inspection.snapshot(ledger, namespace=0).workers
    assert worker.progress["fraction"] == 0.45
    assert inspect_view._progress(worker.progress) == "45 % step 2 of 4"
    assert inspect_view._progress(None) == "-" and inspect_view._progress({"fraction": None, "message": "x"}) == "x"


def test_jobs_withdrawn_from_a_batch_go_back_unstarted_and_the_rest_run(ledger, database_url):
    """A worker's batch, claimed for real: a job cancelled meanwhile and the jobs of a
    queue paused meanwhile are given back (their locks released) before the next start."""
    import threading

    from jobq.store import locks
    from jobq.daemon.boards.idle import IdleBoard
    from jobq.daemon.worker.session import ClaimSession
    from jobq.daemon.worker.loop import WorkerLoop
    from jobq.settings import Settings

    mail = jobq.enqueue_many([{"type": "noop", "queue": "mail", "priority": 9}] * 2, conn=ledger)
    kept, cancelled = jobq.enqueue_many([{"type": "noop", "priority": 5}] * 2, conn=ledger)
    worker = WorkerLoop(Settings.from_env({}, queues="default,mail"), "tok", -1, IdleBoard(), 0)
    worker.worker_id = "host:1:tok"
    lock_base = locks.key(Settings.from_env({}).advisory_namespace, 0)
    worker.session = ClaimSession(database_url, worker_id=worker.worker_id, lock_base=lock_base,
                                  stopping=threading.Event(), in_flight=worker.in_flight)
    worker.session.connect()
    try:
        batch = worker.session.run(lambda conn, _: leases.claim(
            conn, ["default", "mail"], worker_id=worker.worker_id, limit=10, lock_base=lock_base).result())
        assert len(batch) == 4 and all(c.locked for c in batch)
        worker.in_flight.hold(batch)
        jobq.cancel(cancelled.id, conn=ledger)
        worker.in_flight.request_cancel(cancelled.id)  # what the control pipe said
        worker.in_flight.pause("mail")
        assert worker.next_job().job_id == kept.id
        worker.in_flight.finished()
        assert worker.next_job() is None
    finally:
        worker.session.close()
    assert [status(ledger, job.id) for job in mail] == ["pending", "pending"]
    assert status(ledger, cancelled.id) == "cancelled" and status(ledger, kept.id) == "claimed"
    held = ledger.execute(
        f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = ANY(%s) AND {THIS_DATABASE_LOCKS}",
        ([j.id for j in (*mail, cancelled)],),
    ).fetchone()[0]
    assert held == 0
