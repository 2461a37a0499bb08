"""A supervisor's pool (jobq.daemon.pool, JOBQ_MIN_WORKERS): it starts its least and grows
up to its concurrency only while its workers' jobs wait or run long. The supervisor's
decisions in process are in test_supervisor.py; here the worker's side and the real
daemon."""

from __future__ import annotations

import os
import threading
import time

import pytest

import jobq
from jobq.daemon import messages
from jobq.daemon.worker.pacing import SCHEDSTAT, Pace, ThreadSchedule
from jobq.daemon.worker.reports import BLOCKED_EVERY, Reports
from support.daemon import worker_pids
from support.pacing import Schedule, Waits
from support.waiting import wait_for


@pytest.mark.unit
def test_a_batch_whose_jobs_blocked_for_a_millisecond_or_more_each_waited_and_others_did_not():
    waits = Waits()
    pace = Pace(500, waits=waits, schedule=Schedule())

    def batch(jobs: int, blocked: int, seconds: float) -> bool:
        pace.batch_started()
        for _ in range(jobs):
            pace.ran(seconds)
        waits.n += blocked
        pace.batch_over()
        return pace.waited

    assert batch(4, blocked=4, seconds=0.002)  # I/O: more workers would run more at once
    assert not batch(4, blocked=0, seconds=0.002)  # CPU-bound: more would share the cores
    assert not batch(4, blocked=4, seconds=0.0001)  # blocked, but for next to nothing
    assert not batch(4, blocked=3, seconds=0.01)  # less than once a job
    assert Pace(500, waits=None).waited is False


@pytest.mark.unit
def test_time_a_batch_waited_for_a_cpu_is_not_time_its_jobs_blocked():
    waits, schedule = Waits(), Schedule()
    pace = Pace(500, waits=waits, schedule=schedule)

    def batch(pace: Pace, seconds: float, *, on_cpu: float = 0.0, waiting: float = 0.0) -> bool:
        """Four jobs of ``seconds`` each that blocked (four waits), the thread on a CPU
        and waiting for one as said meanwhile."""
        pace.batch_started()
        for _ in range(4):
            pace.ran(seconds)
        waits.n += 4
        schedule.on_cpu += on_cpu
        schedule.waiting += waiting
        pace.batch_over()
        return pace.waited

    assert batch(pace, 0.002, on_cpu=0.0002)  # 7.8 ms blocked: more workers would run more at once
    assert not batch(pace, 0.002, on_cpu=0.0008, waiting=0.006)  # a loaded machine: 1.2 ms blocked, under 1 a job
    assert not batch(pace, 0.002, on_cpu=0.0078)  # CPU-bound, however many waits
    # where the kernel does not say: the handlers' own time, as before
    assert batch(Pace(500, waits=waits, schedule=lambda: None), 0.002)


@pytest.mark.unit
def test_a_job_long_only_by_its_waits_for_a_cpu_is_not_long_by_itself():
    schedule = Schedule()
    pace = Pace(500, waits=Waits(), schedule=schedule)
    pace.batch_started()
    schedule.waiting += 0.2  # the thread runnable, waiting for a core, for 200 ms of the batch
    assert not pace.long_by_itself(0.21)  # 10 ms of its own
    assert pace.long_by_itself(0.3)  # 100 ms of its own
    assert Pace(500, schedule=lambda: None).long_by_itself(0.06)  # the kernel does not say: the clock


@pytest.mark.unit
def test_a_thread_schedule_reads_the_thread_that_opened_it_from_any_thread():
    schedule = ThreadSchedule()
    first = schedule()
    if first is None:
        pytest.fail(f"{SCHEDSTAT} is not readable on this machine")
    until = time.monotonic() + 0.1
    while time.monotonic() < until:
        pass
    spun = schedule()
    assert spun is not None and spun[0] - first[0] >= 0.03  # its time on a CPU, spinning
    read: list[tuple[float, float] | None] = []

    def elsewhere() -> None:
        until = time.monotonic() + 0.2
        while time.monotonic() < until:  # this thread's time, not the one read
            pass
        read.append(schedule())

    other = threading.Thread(target=elsewhere)
    other.start()
    other.join()  # the opener blocked meanwhile
    assert read[0] is not None and spun[0] <= read[0][0] < spun[0] + 0.1  # the opener's, which barely moved


@pytest.mark.unit
def test_a_worker_says_its_jobs_block_at_most_once_a_while_and_not_at_all_in_a_fixed_pool(monkeypatch):
    read_fd, write_fd = messages.report_pipe()
    reader = messages.Reader(read_fd)
    now = [100.0]
    monkeypatch.setattr("jobq.daemon.worker.reports.time.monotonic", lambda: now[0])
    reports = Reports(write_fd, worker_id="w")
    reports.blocked()
    reports.blocked()
    assert reader.read()[0] == [messages.Blocked()]
    now[0] += BLOCKED_EVERY
    reports.blocked()
    reports.boot_error("no module named handlers")
    assert reader.read()[0] == [messages.Blocked(), messages.BootError("no module named handlers")]
    Reports(write_fd, pool_grows=False).blocked()
    assert reader.read()[0] == []
    os.close(read_fd)
    os.close(write_fd)


def _most_at_once(conn, ids: list[int]) -> int:
    runs = [r for (r,) in conn.execute("SELECT result FROM jobs WHERE id = ANY(%s)", (ids,))]
    events = sorted([(r["started"], 1) for r in runs] + [(r["ended"], -1) for r in runs])
    most = at_once = 0
    for _, step in events:
        at_once += step
        most = max(most, at_once)
    return most


@pytest.mark.daemon
def test_a_pool_of_one_drains_short_cpu_bound_jobs_alone_and_grows_to_its_most_for_jobs_that_wait(daemon, conn):
    jobq.enqueue_many([{"type": "timed_burn", "payload": {"seconds": 0.0005}}] * 600, conn=conn)
    d = daemon(4, "--min-workers", "1")  # over the fixed pool the tests' daemons run (JOBQ_MIN_WORKERS=4)
    wait_for(lambda: jobq.counts(conn=conn).depth["done"] == 600, 60, "600 short jobs done")
    pids = {pid for (pid,) in conn.execute("SELECT DISTINCT (result->>'pid')::int FROM jobs")}
    assert len(pids) == 1 and len(worker_pids(conn)) == 1  # never grown: more would share the cores
    sleepers = jobq.enqueue_many([{"type": "timed_sleep", "payload": {"seconds": 3.0}}] * 4, conn=conn)
    wait_for(lambda: jobq.counts(conn=conn).depth["done"] == 604, 30, "four sleeping jobs done")
    assert _most_at_once(conn, [job.id for job in sleepers]) == 4  # one worker each, all at once
    assert len(worker_pids(conn)) == 4
    log = d.log()
    assert "supervisor.pool_grown workers=2 most=4" in log and "supervisor.pool_grown workers=4 most=4" in log
