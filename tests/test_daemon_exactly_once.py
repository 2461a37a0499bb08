"""Exactly-once with real worker processes, real signals and a real PostgreSQL."""

import os
import signal
import time

import pytest

import jobq
from support.daemon import worker_pids
from support.db import scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon, pytest.mark.once]


def status(conn, job_id: int) -> str:
    return jobq.get(job_id, conn=conn).status


def ledger_rows(conn, job_id: int) -> list[tuple]:
    return conn.execute("SELECT lease, pid FROM test_ledger WHERE job_id = %s ORDER BY at", (job_id,)).fetchall()


def running_worker(conn, job_id: int) -> int:
    """The pid of the worker running a job (once it is marked running)."""

    def find():
        return scalar(
            conn,
            "SELECT w.pid FROM jobs j JOIN workers w ON w.id = j.worker_id WHERE j.id = %s AND j.status = 'running'",
            job_id,
        )

    return wait_for(find, 15, f"job {job_id} running")


def test_each_of_5000_jobs_runs_once_with_8_workers(ledger, daemon):
    jobs = jobq.enqueue_many([{"type": "ledger"}] * 5000, conn=ledger)
    daemon(8)
    wait_for(lambda: jobq.counts(conn=ledger).depth["done"] == 5000, 120, "5000 jobs done")
    runs = dict(ledger.execute("SELECT job_id, count(*) FROM test_ledger GROUP BY job_id").fetchall())
    assert len(runs) == 5000 and set(runs.values()) == {1}
    assert set(runs) == {job.id for job in jobs}
    # the ledger's lease is the lease of the claim whose outcome was recorded
    assert scalar(ledger, "SELECT count(*) FROM test_ledger t JOIN jobs j ON j.id = t.job_id AND j.lease = t.lease") == 5000
    counts = jobq.counts(conn=ledger)
    assert counts.totals["done_total"] == 5000
    assert counts.totals.get("failed_runs_total", 0) == 0
    assert counts.totals.get("stale_lease_rejections_total", 0) == 0
    assert len(scalar(ledger, "SELECT array_agg(DISTINCT pid) FROM test_ledger")) > 1


def test_a_worker_killed_mid_job_is_replaced_and_the_job_completes_once(ledger, daemon):
    job = jobq.enqueue("ledger_sleep", {"seconds": 3}, conn=ledger)
    d = daemon(2)
    victim = running_worker(ledger, job.id)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: status(ledger, job.id) == "done", 30, "the job done by another worker")
    row = jobq.get(job.id, conn=ledger)
    assert row.attempt == 1 and "killed by signal 9" in row.errors[0]["error"]
    assert len(ledger_rows(ledger, job.id)) == 1  # the killed run never reached its side effect
    wait_for(lambda: len(worker_pids(ledger)) == 2 and victim not in worker_pids(ledger), 15, "a replacement worker")
    assert "supervisor.worker_died" in d.log()


def test_a_stopped_worker_keeps_its_job_past_the_stale_threshold(ledger, daemon):
    job = jobq.enqueue("ledger_sleep", {"seconds": 1}, conn=ledger)
    daemon(2)  # stale threshold 1.5 s, reaper every 0.3 s
    victim = running_worker(ledger, job.id)
    lease = jobq.get(job.id, conn=ledger).lease
    os.kill(victim, signal.SIGSTOP)
    try:
        time.sleep(4.5)  # three stale thresholds: its session still holds the lock
        row = jobq.get(job.id, conn=ledger)
        assert (row.status, row.lease, row.attempt) == ("running", lease, 0)
    finally:
        os.kill(victim, signal.SIGCONT)
    wait_for(lambda: status(ledger, job.id) == "done", 15, "the job done by its own worker")
    assert ledger_rows(ledger, job.id) == [(lease, victim)]
    assert jobq.counts(conn=ledger).totals.get("reclaimed_total", 0) == 0


def test_a_stopped_worker_whose_session_is_gone_loses_its_job_and_its_late_write(ledger, daemon):
    # Another host leads maintenance: its reaper cannot tell the stopped worker from a
    # lost host (the worker's own supervisor, which knows it alive, would spare it).
    other_host = daemon(1, JOBQ_QUEUES="elsewhere")
    wait_for(lambda: "maintenance.leadership_acquired" in other_host.log(), 15, "the other host leading")
    job = jobq.enqueue("ledger_sleep", {"seconds": 1}, conn=ledger)
    daemon(2)
    victim = running_worker(ledger, job.id)
    first_lease = jobq.get(job.id, conn=ledger).lease
    os.kill(victim, signal.SIGSTOP)
    try:
        ledger.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"jobq %:{victim}:%",),
        )
        wait_for(lambda: status(ledger, job.id) == "done", 20, "the job reclaimed and done by another worker")
        winner = jobq.get(job.id, conn=ledger)
        assert winner.lease != first_lease and winner.attempt == 1 and winner.errors[0]["error"] == "worker lost"
    finally:
        os.kill(victim, signal.SIGCONT)
    counts = lambda: jobq.counts(conn=ledger).totals  # noqa: E731
    wait_for(lambda: counts().get("stale_lease_rejections_total", 0) == 1, 15, "the late write rejected and counted")
    assert jobq.get(job.id, conn=ledger) == winner  # the late write changed nothing
    assert counts()["reclaimed_total"] == 1
    # The winner's run reached its side effect. The stopped one's handler, thawed mid-sleep,
    # reaches it too (at-least-once across a lost worker) unless its worker, finding its
    # lease taken, stops it first: mostly the former, the latter seen once in a whole suite.
    rows = sorted(ledger_rows(ledger, job.id))
    assert (winner.lease, winner_pid(ledger, job.id)) in rows
    assert set(rows) <= {(first_lease, victim), (winner.lease, winner_pid(ledger, job.id))} and len(rows) == len(set(rows))


def winner_pid(conn, job_id: int) -> int:
    return scalar(conn, "SELECT pid FROM test_ledger WHERE job_id = %s AND lease = (SELECT lease FROM jobs WHERE id = %s)", job_id, job_id)


def test_a_cpu_bound_handler_running_three_stale_thresholds_is_not_reclaimed(ledger, daemon):
    job = jobq.enqueue("ledger_burn", {"seconds": 4.5}, conn=ledger)
    daemon(1)
    running_worker(ledger, job.id)
    ages = []
    while status(ledger, job.id) == "running":
        ages.append(float(scalar(ledger, "SELECT extract(epoch FROM now() - heartbeat_at) FROM jobs WHERE id = %s", job.id)))
        time.sleep(0.2)
    assert status(ledger, job.id) == "done"
    assert len(ledger_rows(ledger, job.id)) == 1
    assert max(ages) < 1.5  # the heartbeat kept flowing while the handler held the CPU
    assert jobq.counts(conn=ledger).totals.get("reclaimed_total", 0) == 0
