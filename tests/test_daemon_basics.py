"""The supervisor and its workers: waking, scheduling, supervision, signals."""

import signal
import time
from datetime import datetime, timedelta, timezone

import pytest

import jobq
from jobq.daemon.worker.collector import FIRST_THRESHOLD
from support.daemon import alive, worker_pids
from support.db import advisory_locks, scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon]


def started_after_enqueue(conn, job_id: int) -> float:
    return float(scalar(conn, "SELECT extract(epoch FROM started_at - created_at) FROM jobs WHERE id = %s", job_id))


def wait_done(conn, n: int, timeout: float = 30) -> None:
    wait_for(lambda: jobq.counts(conn=conn).depth["done"] >= n, timeout, f"{n} jobs done")


def test_workers_announce_themselves_and_leave_on_term(conn, daemon):
    d = daemon(3)
    wait_for(lambda: len(worker_pids(conn)) == 3, 15, "3 workers registered")
    d.signal(signal.SIGTERM)
    assert d.wait(10) == 0
    assert worker_pids(conn) == []
    log = d.log()
    assert "supervisor.started" in log and "worker.exited" in log and "supervisor.exited" in log


def test_a_job_enqueued_while_workers_idle_starts_at_once(conn, daemon):
    daemon(2, JOBQ_POLL_INTERVAL="10")
    wait_for(lambda: len(worker_pids(conn)) == 2, 15, "workers up")
    time.sleep(0.3)  # idle, waiting on LISTEN
    job = jobq.enqueue("noop", conn=conn)
    wait_done(conn, 1, 5)
    # NOTIFY, not the 10 s poll: well under a second (typically a few ms)
    assert started_after_enqueue(conn, job.id) < 0.5


def test_a_scheduled_job_starts_within_half_a_second_of_its_time(conn, daemon):
    daemon(2, JOBQ_POLL_INTERVAL="10")
    wait_for(lambda: len(worker_pids(conn)) == 2, 15, "workers up")
    run_at = datetime.now(timezone.utc) + timedelta(seconds=2)
    job = jobq.enqueue("noop", run_at=run_at, conn=conn)
    wait_done(conn, 1, 10)
    lateness = float(scalar(conn, "SELECT extract(epoch FROM started_at - run_at) FROM jobs WHERE id = %s", job.id))
    assert 0 <= lateness < 0.5


def test_a_drain_with_half_the_jobs_scheduled_leaves_no_advisory_lock(conn, daemon):
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    jobq.enqueue_many([{"type": "noop", "run_at": later if i % 2 else None} for i in range(1000)], conn=conn)
    daemon(2)
    wait_done(conn, 500)
    time.sleep(0.5)
    job_locks = {key for key in advisory_locks(conn) if key < 2**48 - 16}
    assert job_locks == set()
    assert jobq.counts(conn=conn).depth["pending"] == 500


def test_handler_exceptions_are_recorded_with_their_traceback(conn, daemon):
    job = jobq.enqueue("always_fail", max_retries=0, conn=conn)
    daemon(1)
    wait_for(lambda: jobq.get(job.id, conn=conn).status == "dead", 15, "the job dead-lettered")
    error = jobq.get(job.id, conn=conn).error
    assert error.startswith("Traceback") and "RuntimeError: always_fail" in error


def test_a_handler_module_that_does_not_import_stops_the_supervisor_with_the_reason(conn, daemon):
    d = daemon(2, JOBQ_HANDLERS="no_such_module_anywhere")
    assert d.wait(20) == 3
    assert "worker failed to boot" in d.log() and "no_such_module_anywhere" in d.log()


def test_a_bad_setting_stops_start_up_naming_the_variable(conn, daemon):
    d = daemon(2, JOBQ_POLL_INTERVAL="soon")
    assert d.wait(10) == 2  # EXIT_CONFIG
    assert d.log().strip().splitlines()[-1].startswith("jobq: JOBQ_POLL_INTERVAL")


def test_a_crash_loop_backs_off_instead_of_spinning(conn, daemon, tmp_path):
    (tmp_path / "crashes_on_import.py").write_text("import os\nos._exit(7)\n")
    d = daemon(2, JOBQ_HANDLERS="crashes_on_import", PYTHONPATH=str(tmp_path))
    time.sleep(4)
    log = d.log()
    spawns = log.count("supervisor.spawned")
    assert "supervisor.crash_loop" in log
    assert spawns < 12  # 2 at start, then one at a time after 0.5, 1, 2 s ...
    assert alive(d.pid)


def test_a_worker_is_recycled_after_max_jobs_per_child(ledger, daemon):
    jobq.enqueue_many([{"type": "ledger"}] * 20, conn=ledger)
    daemon(1, JOBQ_MAX_JOBS_PER_CHILD="5")
    wait_done(ledger, 20)
    pids = scalar(ledger, "SELECT count(DISTINCT pid) FROM test_ledger")
    assert pids >= 4


def test_handlers_run_with_the_collector_settled_for_batches_and_cycles_still_collected(conn, daemon):
    # jobq.daemon.worker.collector: what the worker booted with frozen, the youngest
    # generation collected every FIRST_THRESHOLD allocations (CPython's default: 700); a
    # cycle a handler drops is freed once that many more objects are made, not before.
    few, many = (jobq.enqueue("collector_state", {"allocations": n}, conn=conn)
                 for n in (FIRST_THRESHOLD // 2, 3 * FIRST_THRESHOLD))
    daemon(1)
    wait_done(conn, 2)
    seen_few, seen_many = (jobq.get(job.id, conn=conn).result for job in (few, many))
    assert seen_few["first_threshold"] == FIRST_THRESHOLD and seen_few["frozen"] > 1000
    assert seen_few["cycle_collected"] is False
    assert seen_many["cycle_collected"] is True and seen_many["allocated"] == 3 * FIRST_THRESHOLD


def test_workers_exit_when_their_supervisor_dies(conn, daemon):
    d = daemon(2)
    pids = wait_for(lambda: (p := worker_pids(conn)) and len(p) == 2 and p, 15, "workers up")
    d.signal(signal.SIGKILL)
    d.wait(5)
    wait_for(lambda: not any(alive(pid) for pid in pids), 10, "workers gone after their parent")


def test_ttin_and_ttou_add_and_remove_a_worker(conn, daemon):
    d = daemon(2)
    wait_for(lambda: len(worker_pids(conn)) == 2, 15, "2 workers")
    d.signal(signal.SIGTTIN)
    wait_for(lambda: len(worker_pids(conn)) == 3, 15, "3 workers after TTIN")
    d.signal(signal.SIGTTOU)
    wait_for(lambda: len(worker_pids(conn)) == 2, 15, "2 workers after TTOU")


def test_hup_replaces_every_worker_with_fresh_handler_code(conn, daemon, tmp_path):
    module = tmp_path / "versioned.py"
    module.write_text("import jobq\n@jobq.register('version')\ndef version(job):\n    return {'v': 1}\n")
    d = daemon(2, JOBQ_HANDLERS="versioned", PYTHONPATH=str(tmp_path))
    before = wait_for(lambda: (p := worker_pids(conn)) and len(p) == 2 and set(p), 15, "workers up")
    first = jobq.enqueue("version", conn=conn)
    wait_for(lambda: jobq.get(first.id, conn=conn).status == "done", 10, "v1 job done")
    module.write_text("import jobq\n@jobq.register('version')\ndef version(job):\n    return {'v': 2}\n")
    d.signal(signal.SIGHUP)
    wait_for(lambda: (p := set(worker_pids(conn))) and len(p) == 2 and not p & before, 15, "new workers")
    second = jobq.enqueue("version", conn=conn)
    wait_for(lambda: jobq.get(second.id, conn=conn).status == "done", 10, "v2 job done")
    assert (jobq.get(first.id, conn=conn).result, jobq.get(second.id, conn=conn).result) == ({"v": 1}, {"v": 2})


def test_one_maintenance_process_leads_among_several_supervisors(conn, daemon):
    first = daemon(1)
    wait_for(lambda: "maintenance.leadership_acquired" in first.log(), 15, "the first supervisor leading")
    second = daemon(1)
    wait_for(lambda: len(worker_pids(conn)) == 2, 15, "both supervisors' workers up")
    time.sleep(1)  # several reaper intervals
    assert "maintenance.leadership_acquired" not in second.log()
    first.signal(signal.SIGTERM)
    assert first.wait(10) == 0
    wait_for(lambda: "maintenance.leadership_acquired" in second.log(), 5, "the second taking over")
