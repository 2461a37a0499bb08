"""Faults injected from outside, each with a ledger that counts: every job ends done or
dead, no outcome is recorded twice, no lock or process is left, and each job's handler
ran to completion once (except the one running at a kill, which may run again)."""

from __future__ import annotations

import os
import signal

import pytest

import jobq
from daemon import wait_for, worker_pids
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
