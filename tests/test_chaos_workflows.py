"""Workflows under faults, with a ledger of each run (job, attempt, process): 200 fan-ins
of 20 parents each, drained while a worker is killed with kill -9 every second and
PostgreSQL is restarted once (``pg_ctl restart -m immediate``). Every fan-in releases
its callback exactly once and records its outcome once; a callback runs a second time
only when its own first run was killed; none starts before all its parents finished;
no spawned job is written twice."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest

import jobq
from support.daemon import alive, kill_a_worker, lines_naming, worker_pids_of_session
from support.db import migrated_instance, scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.chaos, pytest.mark.workflows]

FAN_INS, PARENTS = 200, 20


@pytest.fixture
def durable_postgres(tmp_path):
    """An instance of the test's own that keeps every commit it acknowledged across a
    crash restart (synchronous_commit on)."""
    with migrated_instance(tmp_path / "durable-pg", synchronous_commit="on") as server:
        yield server


def test_fan_ins_release_their_callbacks_exactly_once_under_kills_and_a_restart(durable_postgres, daemon):
    from support.handlers import WF_LEDGER_CREATE

    url = durable_postgres.url()
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(WF_LEDGER_CREATE)
    runs = []
    for f in range(FAN_INS):
        wf = jobq.Workflow(name=f"fan-in-{f}")
        parents = [wf.add("wf_chaos_parent", {"i": i}) for i in range(PARENTS)]
        wf.add("wf_chaos_callback", after=parents, name="callback")
        runs.append(wf.enqueue(conn=conn))
    callbacks = {run.jobs["callback"].id for run in runs}
    total = FAN_INS * (PARENTS + 1)

    d = daemon(4, url=url)
    kills, restarted = 0, False
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        done = jobq.counts(conn=conn).depth["done"]
        if done >= total + FAN_INS:  # the parents, the callbacks and their spawned leaves
            break
        if not restarted and done >= total // 3:
            conn.close()
            durable_postgres.stop(mode="immediate")
            time.sleep(0.5)
            durable_postgres.start()
            conn = psycopg.connect(url, autocommit=True)
            restarted = True
        time.sleep(1)
        kills += kill_a_worker(conn)
    dead_workers = {pid for (pid,) in conn.execute("SELECT DISTINCT pid FROM wf_ledger") if not alive(pid)}
    d.signal(signal.SIGTERM)
    d.wait(30)
    wait_for(lambda: not worker_pids_of_session(d.pid), 10, "no process of the daemon left")
    assert restarted and kills >= 3

    statuses = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    print(f"\nchaos | workflows: {FAN_INS} fan-ins of {PARENTS}, {kills} kills, 1 restart | {statuses}")
    assert statuses == {"done": total + FAN_INS}
    # Each callback released once, after all its parents: its 20 edges settled done,
    # no parent left, the 20 results copied in, and its first run after its parents'
    # last outcome (completed_at is the outcome's transaction time, before its commit).
    assert scalar(conn, "SELECT count(*) FROM jobq_workflow_edges WHERE outcome = 'done'") == FAN_INS * PARENTS
    assert scalar(conn, "SELECT count(*) FROM jobq_workflow_steps WHERE parents_left <> 0") == 0
    early = scalar(
        conn,
        "SELECT count(*) FROM jobq_workflow_steps AS c JOIN jobq_workflow_edges AS e "
        "ON e.workflow_id = c.workflow_id AND e.child = c.name "
        "JOIN jobq_workflow_steps AS p ON p.workflow_id = e.workflow_id AND p.name = e.parent "
        "JOIN jobs AS pj ON pj.id = p.job_id "
        "WHERE c.name = 'callback' AND pj.completed_at >= (SELECT min(at) FROM wf_ledger WHERE job_id = c.job_id)",
    )
    assert early == 0
    results = conn.execute("SELECT result FROM jobs WHERE id = ANY(%s)", (list(callbacks),)).fetchall()
    assert {(r["parents"], r["sum"]) for (r,) in results} == {(PARENTS, sum(range(PARENTS)))}
    # Each outcome recorded once (the totals count one done per job).
    assert jobq.counts(conn=conn).totals.get("done_total", 0) == total + FAN_INS
    # A job ran twice only when its first run's worker was killed, and no job ran twice
    # on a worker still alive.
    first_of_reruns = conn.execute(
        "SELECT DISTINCT ON (job_id) job_id, pid FROM wf_ledger WHERE job_id IN "
        "(SELECT job_id FROM wf_ledger GROUP BY job_id HAVING count(*) > 1) ORDER BY job_id, at"
    ).fetchall()
    assert {pid for _, pid in first_of_reruns} <= dead_workers, story(
        conn, [job_id for job_id, pid in first_of_reruns if pid not in dead_workers], d.log())
    callback_reruns = sum(1 for job_id, _ in first_of_reruns if job_id in callbacks)
    # Spawned once: one leaf per callback, whatever its runs.
    assert scalar(conn, "SELECT count(*) FROM jobq_workflow_steps WHERE spawned_by = 'callback'") == FAN_INS
    assert scalar(conn, "SELECT count(*) FROM jobs WHERE type = 'wf_chaos_leaf'") == FAN_INS
    print(f"chaos | callbacks run again after their own run was killed: {callback_reruns}")
    conn.close()


def story(conn: psycopg.Connection, job_ids: list[int], log: str) -> str:
    """What the ledger, the job's row and the daemon's log say of jobs run twice by a
    worker still alive: for a failure to be read."""
    told = []
    for job_id in job_ids:
        told.append(f"job {job_id}: runs (attempt, pid, at) "
                    f"{conn.execute('SELECT attempt, pid, at FROM wf_ledger WHERE job_id = %s ORDER BY at', (job_id,)).fetchall()}; "
                    f"row (attempt, errors) {conn.execute('SELECT attempt, errors FROM jobs WHERE id = %s', (job_id,)).fetchone()}")
        told += [f"  {line}" for line in lines_naming(log, job_id)]
    return "\n".join(told)
