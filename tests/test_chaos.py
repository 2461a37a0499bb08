"""Faults injected from outside, each with a ledger that counts: every job ends done or
dead, no outcome is recorded twice, no lock or process is left, and each job's handler
ran to completion once (except the one running at a kill, which may run again).

Each scenario prints its row of the table (run with ``-s`` to see them)::

    chaos | scenario | jobs | done | dead | lost | duplicate runs | locks left
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import psycopg
import pytest

import jobq
from support.daemon import alive, kill_a_worker, worker_pids, worker_pids_of_session
from support.db import advisory_locks, alter_beside_traffic, migrated_instance, scalar
from support.waiting import wait_for
from jobq.store import locks

pytestmark = [pytest.mark.db, pytest.mark.chaos]

RUNS = "SELECT job_id, count(*) FROM test_ledger GROUP BY job_id"


@pytest.fixture
def durable_postgres(tmp_path):
    """A PostgreSQL instance of the test's own that keeps every commit it acknowledged
    across a crash restart (synchronous_commit on; the suite's servers trade that for
    speed, which would make a crash lose outcomes the workers saw committed)."""
    with migrated_instance(tmp_path / "durable-pg", synchronous_commit="on") as server:
        yield server


def ledger_jobs(url: str, n: int, seconds: float) -> list[jobq.Job]:
    """On another database than the ``ledger`` fixture's: its ledger table, and ``n``
    ledger_sleep jobs of ``seconds``."""
    from support.handlers import LEDGER_CREATE

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(LEDGER_CREATE)
        return jobq.enqueue_many([{"type": "ledger_sleep", "payload": {"seconds": seconds}}] * n, conn=conn)


def runs(conn) -> dict[int, int]:
    """How many times each ledger job's handler ran to completion."""
    return dict(conn.execute(RUNS).fetchall())


def job_locks(conn) -> set[int]:
    """The jobs whose advisory lock some session holds (not jobq's own reserved locks)."""
    return {key for key in advisory_locks(conn) if key <= locks.MAX_JOB_ID}


def statuses(conn, ids) -> dict[str, int]:
    rows = conn.execute("SELECT status, count(*) FROM jobs WHERE id = ANY(%s) GROUP BY status", (list(ids),))
    return dict(rows.fetchall())


def finished(conn, jobs) -> bool:
    """Every one of ``jobs`` is done or dead."""
    found = statuses(conn, [j.id for j in jobs])
    return found.get("done", 0) + found.get("dead", 0) == len(jobs)


def tally(
    conn, scenario: str, jobs, daemons, *, reruns: int = 0, deaths: bool = False, supervisor_killed: bool = False
) -> None:
    """Stop the daemons (TERM), then check and print the ledger of ``jobs``: none lost,
    each outcome recorded once, no lock or process left, and no handler that ran to
    completion twice but ``reruns`` of them. With ``deaths`` (workers killed, from
    outside or by their jobs, any number), a job may run twice only if its first run
    was on a worker that then died, and only the one job it was running at its death
    (the jobs it had finished are recorded from its finished area, never run again).
    With ``supervisor_killed``, the shared memory died too: a dead worker's jobs finished in
    its last few milliseconds may also run again."""
    dead_workers = {pid for (pid,) in conn.execute("SELECT DISTINCT pid FROM test_ledger") if not alive(pid)}
    for d in daemons:
        if alive(d.pid):
            d.signal(signal.SIGTERM)
            d.wait(30)
        wait_for(lambda: not worker_pids_of_session(d.pid), 10, "no process of the daemon left")
    ids = [j.id for j in jobs]
    found = statuses(conn, ids)
    done, dead = found.get("done", 0), found.get("dead", 0)
    duplicates = sum(n - 1 for job_id, n in runs(conn).items() if job_id in set(ids))
    locks_left = len(job_locks(conn))
    print(f"\nchaos | {scenario} | {len(ids)} | {done} | {dead} | {len(ids) - done - dead} | {duplicates} | {locks_left}")
    assert done + dead == len(ids) and locks_left == 0
    if deaths:
        first_runs = conn.execute(
            "SELECT DISTINCT ON (job_id) job_id, pid FROM test_ledger WHERE job_id IN "
            "(SELECT job_id FROM test_ledger GROUP BY job_id HAVING count(*) > 1) ORDER BY job_id, at"
        ).fetchall()
        first_pids = [pid for _, pid in first_runs]
        assert set(first_pids) <= dead_workers
        if not supervisor_killed:
            assert max(Counter(first_pids).values(), default=0) <= 1
    else:
        assert duplicates <= reruns
    # each outcome recorded once: done entered once per job, one dead letter per dead
    # job, and one recorded failure per failed attempt
    assert jobq.counts(conn=conn).totals.get("done_total", 0) == done
    assert scalar(conn, "SELECT count(*) FROM dead_letter_jobs WHERE original_id = ANY(%s)", ids) == dead
    miscounted = scalar(
        conn,
        "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND jsonb_array_length(errors) "
        "<> attempt + CASE WHEN status = 'dead' THEN 1 ELSE 0 END",
        ids,
    )
    assert miscounted == 0


def test_poison_jobs_that_kill_their_workers_never_starve_the_others(ledger, daemon):
    poison = jobq.enqueue_many([{"type": "segfault", "max_retries": 1, "priority": 9}] * 8, conn=ledger)
    ordinary = jobq.enqueue_many([{"type": "ledger"}] * 20, conn=ledger)
    daemon(4)
    wait_for(lambda: statuses(ledger, [j.id for j in ordinary]) == {"done": 20}, 10, "the 20 ordinary jobs done")
    wait_for(lambda: statuses(ledger, [j.id for j in poison]) == {"dead": 8}, 20, "the 8 poison jobs dead")
    assert set(runs(ledger).values()) == {1}


def test_a_failure_still_buffered_when_its_worker_is_killed_is_recorded_once_with_its_own_error(ledger, daemon):
    """A failed run is noted in the finished area and waits for the next write, as a
    success does: here the next job of its batch kills the worker at once. Maintenance
    records the failure as the worker would have (its error, one attempt), and the next
    run of the job is its retry, not a second first run."""
    warm = jobq.enqueue_many([{"type": "ledger", "priority": 9}] * 3, conn=ledger)  # claims of 1, then 2
    failing = jobq.enqueue("ledger_fail_first", priority=8, conn=ledger)  # the next claim takes these two
    killer = jobq.enqueue("ledger_killed_first", priority=7, conn=ledger)
    d = daemon(1)
    wait_for(lambda: statuses(ledger, [failing.id, killer.id]) == {"done": 2}, 30, "both jobs done after the kill")
    row = jobq.get(failing.id, conn=ledger)
    (error,) = [e["error"] for e in row.errors]
    assert row.attempt == 1 and error.endswith(f"ValueError: planned failure of job {failing.id}"), error
    assert runs(ledger) == {**{j.id: 1 for j in warm}, failing.id: 2, killer.id: 1}
    # recovered by maintenance from the dead worker's memory: the failure and the killer's run
    wait_for(lambda: "retried=2" in d.log(), 10, "the recovery of both jobs logged")
    assert job_locks(ledger) == set()


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


def test_jobs_finished_just_before_a_kill_are_recorded_and_only_the_running_one_runs_again(ledger, daemon):
    # One worker claims 1, 2, 4, 8, then 16: the last 15 short jobs and the killer, which
    # kills its worker within microseconds of the job before it, whose outcome (and
    # most of its batch's) still waits in the worker's buffer.
    short = jobq.enqueue_many([{"type": "ledger", "priority": 9}] * 30, conn=ledger)
    killer = jobq.enqueue("ledger_killed_first", priority=1, conn=ledger)
    d = daemon(1, JOBQ_CLAIM_BATCH="50")
    wait_for(lambda: finished(ledger, [*short, killer]), 30, "every job done after the kill")
    assert runs(ledger) == {**{j.id: 1 for j in short}, killer.id: 1}
    assert {jobq.get(j.id, conn=ledger).attempt for j in short} == {0}
    again = jobq.get(killer.id, conn=ledger)
    assert again.attempt == 1 and "worker process died while running this job" in again.errors[0]["error"]
    assert "completed=" in d.log() and "completed=0 " not in d.log()  # recorded by maintenance
    tally(ledger, "worker killed just after finishing jobs", [*short, killer], [d], deaths=True)


def test_a_supervisor_killed_mid_job_takes_its_worker_along_and_the_job_comes_back_with_an_attempt(ledger, daemon):
    job = jobq.enqueue("ledger_slow_first", {"seconds": 60}, conn=ledger)  # its timeout: 300 s by default
    first = daemon(1)
    wait_for(lambda: jobq.get(job.id, conn=ledger).status == "running", 15, "the job running")
    (worker,) = worker_pids(ledger)
    first.signal(signal.SIGKILL)
    first.wait(5)
    wait_for(lambda: not alive(worker), 3, "the worker gone with its supervisor, job and all")
    wait_for(lambda: job_locks(ledger) == set(), 5, "its session ended with it")
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


def test_workers_killed_every_second_while_draining(ledger, daemon):
    jobs = jobq.enqueue_many([{"type": "ledger_sleep", "payload": {"seconds": 0.02}}] * 600, conn=ledger)
    d = daemon(4)
    kills = 0
    while not finished(ledger, jobs) and kills < 30:
        time.sleep(1)
        kills += kill_a_worker(ledger)
    wait_for(lambda: finished(ledger, jobs), 60, "every job done or dead")
    tally(ledger, f"workers killed -9 every second ({kills} kills)", jobs, [d], deaths=True)


def test_the_database_restarted_immediately_twice_mid_drain(durable_postgres, daemon):
    url = durable_postgres.url()
    jobs = ledger_jobs(url, 1500, 0.005)
    # Down for longer than the stale threshold: the workers keep their jobs (re-locked
    # once the database is back), their own supervisor's reaper spares them.
    d = daemon(2, url=url)
    for round_ in (1, 2):
        with psycopg.connect(url, autocommit=True) as conn:
            wait_for(lambda: jobq.counts(conn=conn).depth["done"] >= 300 * round_, 60, "jobs flowing")
        durable_postgres.stop(mode="immediate")
        time.sleep(0.5)
        durable_postgres.start()
    with psycopg.connect(url, autocommit=True) as conn:
        wait_for(lambda: finished(conn, jobs), 90, "every job done or dead after two restarts")
        tally(conn, "pg_ctl restart -m immediate, twice", jobs, [d])


def test_every_jobq_backend_terminated_mid_drain(ledger, daemon):
    jobs = jobq.enqueue_many([{"type": "ledger_sleep", "payload": {"seconds": 0.005}}] * 1500, conn=ledger)
    d = daemon(2)
    for round_ in (1, 2, 3):
        wait_for(lambda: jobq.counts(conn=ledger).depth["done"] >= 300 * round_, 60, "jobs flowing")
        ledger.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'jobq%%' "
                       "AND datname = current_database()")
    wait_for(lambda: finished(ledger, jobs), 60, "every job done or dead")
    tally(ledger, "every jobq backend terminated, 3 times", jobs, [d])


def test_a_worker_stopped_past_the_stale_threshold_loses_nothing_and_runs_nothing_twice(ledger, daemon):
    jobs, d, victim = flowing_with_a_victim(ledger, daemon)
    os.kill(victim, signal.SIGSTOP)
    time.sleep(3)  # twice the stale threshold
    os.kill(victim, signal.SIGCONT)
    wait_for(lambda: finished(ledger, jobs), 60, "every job done or dead")
    tally(ledger, "a worker stopped for 2x the stale threshold", jobs, [d])


def test_a_worker_cut_off_past_the_stale_threshold_keeps_its_jobs_and_runs_nothing_twice(ledger, daemon):
    jobs, d, victim = flowing_with_a_victim(ledger, daemon)
    os.kill(victim, signal.SIGSTOP)  # it cannot reconnect before it is let go on
    session = f"jobq worker %:{victim}:%"
    ledger.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s", (session,))
    wait_for(lambda: not scalar(ledger, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s", session),
             10, "its session ended, its locks with it")
    assert held_by(ledger, victim)  # what a reaper could take
    time.sleep(3)  # twice the stale threshold: the reaper of its own supervisor spares it
    os.kill(victim, signal.SIGCONT)
    wait_for(lambda: finished(ledger, jobs), 60, "every job done or dead")
    assert "reaper.reclaimed" not in d.log() and "worker.reconnected" in d.log()
    tally(ledger, "a worker cut off for 2x the stale threshold", jobs, [d])


def flowing_with_a_victim(ledger, daemon):
    """300 short jobs flowing through two workers (50 done), and one worker's pid."""
    jobs = jobq.enqueue_many([{"type": "ledger_sleep", "payload": {"seconds": 0.01}}] * 300, conn=ledger)
    d = daemon(2)
    wait_for(lambda: jobq.counts(conn=ledger).depth["done"] >= 50, 30, "jobs flowing")
    return jobs, d, worker_pids(ledger)[0]


def held_by(conn, pid: int) -> list[int]:
    """The in-flight jobs of the worker process ``pid``."""
    return [job_id for (job_id,) in conn.execute(
        "SELECT id FROM jobs WHERE status IN ('claimed', 'running') AND worker_id LIKE %s", (f"%:{pid}:%",)
    )]


def test_the_supervisor_killed_and_replaced_mid_drain(ledger, daemon):
    jobs = jobq.enqueue_many([{"type": "ledger_sleep", "payload": {"seconds": 0.01}}] * 600, conn=ledger)
    first = daemon(2)
    wait_for(lambda: jobq.counts(conn=ledger).depth["done"] >= 100, 30, "jobs flowing")
    first.signal(signal.SIGKILL)
    first.wait(5)
    second = daemon(2)
    wait_for(lambda: finished(ledger, jobs), 60, "every job done or dead")
    tally(ledger, "the supervisor killed -9 and replaced", jobs, [first, second], deaths=True, supervisor_killed=True)


def test_poison_jobs_that_exit_segfault_or_hang_among_ordinary_ones(ledger, daemon):
    poison = jobq.enqueue_many(
        [{"type": "exit_now", "max_retries": 1}] * 4 + [{"type": "segfault", "max_retries": 1}] * 4
        + [{"type": "hang", "max_retries": 0}] * 2,
        conn=ledger,
    )
    ordinary = jobq.enqueue_many([{"type": "ledger"}] * 300, conn=ledger)
    d = daemon(4)
    wait_for(lambda: finished(ledger, poison + ordinary), 60, "every job done or dead")
    assert statuses(ledger, [j.id for j in ordinary]) == {"done": 300}
    assert statuses(ledger, [j.id for j in poison]) == {"dead": 10}
    tally(ledger, "poison jobs: 4 exit, 4 segfault, 2 hang", poison + ordinary, [d], deaths=True)


def take_every_connection(url: str) -> list[psycopg.Connection]:
    hogs = []
    try:
        while True:
            hogs.append(psycopg.connect(url, autocommit=True))
    except psycopg.OperationalError:  # too many clients
        return hogs


def test_connections_exhausted_for_10_seconds(own_postgres, daemon):
    url = own_postgres.url()
    jobs = ledger_jobs(url, 400, 0.01)
    with psycopg.connect(url, autocommit=True) as conn:
        d = daemon(2, url=url)
        wait_for(lambda: jobq.counts(conn=conn).depth["done"] >= 50, 30, "jobs flowing")
        hogs = take_every_connection(url)
        # Stopped while their sessions end and the slots are taken: else a process that
        # notices at once reconnects into a freed slot before the hogs take it.
        processes = [d.pid, *worker_pids_of_session(d.pid)]
        for pid in processes:
            os.kill(pid, signal.SIGSTOP)
        conn.execute(  # waiting (up to 5 s) for each session to end: its slot free
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name LIKE 'jobq%%'"
        )
        hogs += take_every_connection(url)  # the slots jobq's sessions had: now nobody can reconnect
        for pid in processes:
            os.kill(pid, signal.SIGCONT)
        time.sleep(10)
        for hog in hogs:
            hog.close()
        assert "db_unavailable" in d.log()  # they waited, as for a database that is down
        wait_for(lambda: finished(conn, jobs), 60, "every job done or dead once connections are back")
        tally(conn, f"max_connections exhausted for 10 s ({len(hogs)} taken)", jobs, [d])


REFUSE_DONE = """
CREATE FUNCTION test_refuse_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'done' AND NEW.type = 'ledger' THEN
        RAISE EXCEPTION 'refused by test_refuse_done';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_refuse_done BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION test_refuse_done();
"""


def test_a_worker_whose_outcome_write_fails_leaves_cleanly_and_charges_no_attempt(ledger, daemon):
    ledger.execute(REFUSE_DONE)  # an operator's trigger that refuses some outcomes
    try:
        job = jobq.enqueue("ledger", conn=ledger)
        d = daemon(1)
        wait_for(lambda: "worker.database_error" in d.log(), 15, "the worker meeting the refusal")
    finally:
        alter_beside_traffic(ledger, "DROP TRIGGER test_refuse_done ON jobs; DROP FUNCTION test_refuse_done()")
    done = wait_for(lambda: (j := jobq.get(job.id, conn=ledger)).status == "done" and j, 30, "the job done at last")
    assert done.attempt == 0 and done.errors == []  # no false "worker process died" attempt
    assert "child.failed" not in d.log()
    tally(ledger, "outcome write refused by the database", [job], [d], reruns=1)
