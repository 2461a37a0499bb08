"""Faults injected from outside, each with a ledger that counts: every job ends done or
dead, no outcome is recorded twice, no lock or process is left, and each job's handler
ran to completion once (except the one running at a kill, which may run again)."""

from __future__ import annotations

import os
import signal

import pytest

import jobq
from daemon import alive, wait_for, worker_pids
from jobq import locks
from support import advisory_locks

pytestmark = [pytest.mark.db, pytest.mark.chaos]

RUNS = "SELECT job_id, count(*) FROM test_ledger GROUP BY job_id"


def runs(conn) -> dict[int, int]:
    """How many times each ledger job's handler ran to completion."""
    return dict(conn.execute(RUNS).fetchall())


def job_locks(conn) -> set[int]:
    """The jobs whose advisory lock some session holds (not jobq's own reserved locks)."""
    return {key for key in advisory_locks(conn) if key <= locks.MAX_JOB_ID}


def statuses(conn, ids) -> dict[str, int]:
    rows = conn.execute("SELECT status, count(*) FROM jobs WHERE id = ANY(%s) GROUP BY status", (list(ids),))
    return dict(rows.fetchall())


def test_poison_jobs_that_kill_their_workers_never_starve_the_others(ledger, daemon):
    poison = jobq.enqueue_many([{"type": "segfault", "max_retries": 1, "priority": 9}] * 8, conn=ledger)
    ordinary = jobq.enqueue_many([{"type": "ledger"}] * 20, conn=ledger)
    daemon(4)
    wait_for(lambda: statuses(ledger, [j.id for j in ordinary]) == {"done": 20}, 10, "the 20 ordinary jobs done")
    wait_for(lambda: statuses(ledger, [j.id for j in poison]) == {"dead": 8}, 20, "the 8 poison jobs dead")
    assert set(runs(ledger).values()) == {1}


def test_jobs_finished_before_a_long_one_are_recorded_and_never_run_again_after_a_kill(ledger, daemon):
    short = jobq.enqueue_many([{"type": "ledger", "priority": 9}] * 40, conn=ledger)
    long = jobq.enqueue("ledger_sleep", {"seconds": 2}, priority=1, conn=ledger)
    daemon(1)
    wait_for(lambda: jobq.get(long.id, conn=ledger).status == "running", 15, "the long job running")
    # everything that finished before it is recorded, not held as claimed behind it
    assert statuses(ledger, [j.id for j in short]) == {"done": 40}
    (worker,) = worker_pids(ledger)
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: jobq.get(long.id, conn=ledger).status == "done", 30, "the long job done after the kill")
    assert runs(ledger) == {**{j.id: 1 for j in short}, long.id: 1}
    assert job_locks(ledger) == set()


def test_a_supervisor_killed_mid_job_takes_its_worker_along_and_the_job_comes_back_with_an_attempt(ledger, daemon):
    job = jobq.enqueue("ledger_slow_first", {"seconds": 60}, conn=ledger)  # its timeout: 300 s by default
    first = daemon(1)
    wait_for(lambda: jobq.get(job.id, conn=ledger).status == "running", 15, "the job running")
    (worker,) = worker_pids(ledger)
    first.signal(signal.SIGKILL)
    first.wait(5)
    wait_for(lambda: not alive(worker), 3, "the worker gone with its supervisor, job and all")
    assert job_locks(ledger) == set()  # its session ended with it
    daemon(1)  # another host: its stale reaper takes the job back, charged an attempt
    done = wait_for(lambda: (j := jobq.get(job.id, conn=ledger)).status == "done" and j, 20, "the job done again")
    assert done.attempt == 1 and done.errors[0]["error"] == "worker lost"
    assert runs(ledger) == {job.id: 1}


def test_a_dead_job_requeued_by_hand_dies_again_without_crashing_anything(ledger, daemon):
    job = jobq.enqueue("always_fail", max_retries=0, conn=ledger)
    d = daemon(2)
    wait_for(lambda: jobq.get(job.id, conn=ledger).status == "dead", 15, "the job dead")
    ledger.execute("UPDATE jobs SET status = 'pending', attempt = 0, run_at = now() WHERE id = %s", (job.id,))
    wait_for(lambda: jobq.get_dead(1, conn=ledger).attempts == 2, 15, "its dead letter updated by the second death")
    assert jobq.get(job.id, conn=ledger).status == "dead"
    log = d.log()
    assert "worker_died" not in log and "child.failed" not in log and "duty_failed" not in log
