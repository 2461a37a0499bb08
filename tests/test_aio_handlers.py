"""``async def`` handlers in the real daemon: run on one event loop per worker process,
their result awaited through jobq.aio; progress, snooze and failures as for sync
handlers; a cancel cancels the handler's task (asyncio.CancelledError at its next
await, through loop.add_signal_handler), a coroutine that never awaits is killed after
JOBQ_CANCEL_GRACE, and the job's timeout kills its worker."""

from __future__ import annotations

import asyncio

import pytest

import jobq
import jobq.aio
from jobq.jobs import queues
from support.daemon import worker_pids
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon, pytest.mark.aio]

HANDLERS = {"JOBQ_HANDLERS": "support.handlers,support.async_handlers"}


def running(conn, job_id: int) -> None:
    wait_for(lambda: jobq.get(job_id, conn=conn).status == "running", 15, f"job {job_id} running")


def test_async_handlers_run_on_one_loop_per_worker_with_progress_snooze_and_failures(conn, daemon, tmp_path):
    add = [jobq.enqueue("async_add", {"a": n, "b": 1}, conn=conn) for n in range(3)]
    sleeper = jobq.enqueue("async_sleep", {"seconds": 1.5, "mark": str(tmp_path / "mark")}, conn=conn)
    snoozer = jobq.enqueue("async_snooze_once", conn=conn)
    failing = jobq.enqueue("async_fail", conn=conn)
    daemon(1, **HANDLERS)

    progress = wait_for(lambda: jobq.get(sleeper.id, conn=conn).progress, 15, "the async handler's progress")
    assert (progress["fraction"], progress["message"], progress["data"]) == (0.5, "half way", {"step": 1})

    async def results():
        return await asyncio.gather(*(jobq.aio.result(job.id, timeout=30) for job in [*add, sleeper, snoozer]))

    *sums, slept, snoozed = asyncio.run(results())
    assert [s["sum"] for s in sums] == [1, 2, 3]
    assert len({(s["pid"], s["loop"]) for s in sums}) == 1  # one worker, one loop kept between jobs
    assert slept == {"slept": 1.5} and snoozed == {"snoozes": 1}
    dead = asyncio.run(jobq.aio.wait(failing.id, timeout=30))
    assert dead.status == "dead" and "ValueError: async handler failed" in dead.error
    assert not (tmp_path / "mark").exists()  # nothing was cancelled


def test_a_cancel_cancels_the_async_handlers_task_and_its_worker_goes_on(conn, daemon, tmp_path):
    mark = tmp_path / "mark"
    job = jobq.enqueue("async_sleep", {"seconds": 60, "mark": str(mark)}, conn=conn)
    d = daemon(1, JOBQ_CANCEL_GRACE="30", **HANDLERS)
    running(conn, job.id)
    pids = worker_pids(conn)
    jobq.cancel(job.id, conn=conn)
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "cancelled" and mark.exists(), 10, "the task cancelled")
    wait_for(lambda: f"job.cancelled id={job.id}" in d.log(), 10, "the worker's log of the cancelled run")
    assert mark.read_text().split()[0] == "cancelled"  # the handler saw asyncio.CancelledError
    assert worker_pids(conn) == pids  # nothing was killed
    after = jobq.enqueue("async_add", {"a": 2, "b": 2}, conn=conn)  # the loop and its signals are back to normal
    assert jobq.result(after.id, timeout=30)["sum"] == 4


def test_an_async_handlers_cleanup_is_not_cancelled_again_by_the_next_control_signal(conn, daemon, tmp_path):
    """Its task is cancelled once: stopped by its worker (its lease taken away, as by
    another host's reaper), the cleanup it awaits is not cancelled by the signal of a
    pause of another queue that arrives meanwhile."""
    mark = tmp_path / "mark"
    job = jobq.enqueue("async_sleep", {"seconds": 60, "cleanup": 1.5, "mark": str(mark)}, conn=conn)
    d = daemon(1, JOBQ_CANCEL_GRACE="30", **HANDLERS)
    running(conn, job.id)
    conn.execute("UPDATE jobs SET lease = lease + 1000 WHERE id = %s", (job.id,))
    wait_for(lambda: mark.exists(), 10, "the task cancelled by its worker's lifeline")
    queues.pause("elsewhere", conn=conn)
    wait_for(lambda: "cleaned" in mark.read_text(), 10, "the whole cleanup")
    wait_for(lambda: f"job.stale_lease_rejected id={job.id}" in d.log(), 10, "the stopped run's outcome refused")
    assert [line.split()[0] for line in mark.read_text().splitlines()] == ["cancelled", "cleaned"]
    assert "job.stop_killed" not in d.log()


def test_an_async_handler_that_never_awaits_is_killed_after_the_cancel_grace(conn, daemon, tmp_path):
    mark = tmp_path / "mark"
    job = jobq.enqueue("async_spin", {"mark": str(mark)}, conn=conn)
    d = daemon(1, JOBQ_CANCEL_GRACE="1", **HANDLERS)
    running(conn, job.id)
    jobq.cancel(job.id, conn=conn)
    wait_for(lambda: "job.cancel_killed" in d.log(), 15, "the worker killed past the grace")
    assert jobq.get(job.id, conn=conn).status == "cancelled"
    assert mark.read_text().split()[0] == "spinning" and "cancelled" not in mark.read_text()


def test_an_async_handler_past_its_timeout_is_killed_and_its_job_fails(conn, daemon):
    job = jobq.enqueue("async_hang", max_retries=0, conn=conn)
    daemon(1, **HANDLERS)
    dead = wait_for(lambda: (j := jobq.get(job.id, conn=conn)).status == "dead" and j, 20, "the timed-out job dead")
    assert dead.error == "timeout after 1 s"
