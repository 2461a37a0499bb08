"""A host lost (kill -9 of every process of it: its supervisor, its workers, its
maintenance, and a CLI it ran) in the middle of work that outlives one transaction,
across three hosts for real (support.netns), with the file ledger of handler runs.

- A bulk cancel of 40,000 jobs started by ``jobq bulk`` on the host that leads
  maintenance, killed after its first chunks: each chunk is one transaction (the jobs
  cancelled and the operation's cursor and counts moved together), so what was done is
  exactly what the operation says; its runner's lock went with the session, and the
  new leader (another host) resumes it from its cursor. Meanwhile a drain runs on every
  host: the lost host's running jobs are taken back and run elsewhere, never alongside
  their first run.
- Fan-ins (workflows of parents and one callback) mid-drain: the lost host's parents run
  again elsewhere; each callback is released once, after all its parents finished.
"""

from __future__ import annotations

import sys
import time

import psycopg
import pytest

import jobq
from jobq.jobs import operations
from support import ledger
from support.netns import Host
from support.waiting import wait_for
from test_hosts import host_of, leaders
from test_hosts_partition import SETTINGS, SLACK

pytestmark = [pytest.mark.db, pytest.mark.hosts, pytest.mark.control, pytest.mark.workflows]

WORKERS = 3
BULK = 40_000  # jobs of a queue nobody serves, cancelled in chunks of operations.CHUNK
DRAIN = 300  # held jobs of 0.2 s on every host meanwhile
FAN_INS, PARENTS = 24, 5
PARENT_SECONDS = 1.0
OPERATION = "SELECT state, matched, changed, skipped, cursor FROM jobq_operations WHERE id = %s"
CANCELLED = "SELECT count(*) FROM jobs WHERE queue = 'bulk' AND status = 'cancelled'"


def start_leader_first(cluster, tmp_path, conn: psycopg.Connection, path) -> None:
    """host1's supervisor, leading maintenance, then the two others'; every worker registered."""
    env = {**SETTINGS, ledger.ENV: str(path)}
    cluster.hosts[0].start(tmp_path, WORKERS, **env)
    assert host_of(wait_for(lambda: leaders(conn), 60, "host1 leading")[0]) == "host1"
    for host in cluster.hosts[1:]:
        host.start(tmp_path, WORKERS, **env)
    wait_for(lambda: conn.execute("SELECT count(*) FROM workers").fetchone()[0] == 3 * WORKERS, 60,
             "every host's workers registered")


def kill_mid_run(host: Host, path) -> float:
    """Kill every process of ``host`` at a moment one of its handlers is running (frozen
    first, the ledger read, thawed to try again if none was caught mid-run: a kill that
    fell between two short jobs would test nothing taken back); when it was killed."""
    deadline = time.monotonic() + SLACK
    while True:
        host.freeze()
        if any(run.host == host.name and run.ended is None for run in ledger.runs(path)):
            host.kill()
            return time.time()
        host.thaw()
        assert time.monotonic() < deadline, f"none of {host.name}'s handlers caught running in {SLACK:g} s"
        time.sleep(0.01)


def killed_runs(runs: list[ledger.Run], host: str, at: float) -> int:
    """End the lost host's runs that have no end at the kill (they died with it); how many."""
    cut = [run for run in runs if run.host == host and run.ended is None]
    for run in cut:
        run.ended, run.how = at, "killed"
    return len(cut)


def test_a_bulk_cancel_whose_host_is_lost_is_resumed_elsewhere_and_matches_what_it_changed(cluster, tmp_path):
    path = tmp_path / "ledger"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        start_leader_first(cluster, tmp_path, conn, path)
        jobq.enqueue_many([{"type": "noop", "queue": "bulk"}] * BULK, conn=conn)
        jobq.enqueue_many([{"type": "held", "payload": {"seconds": 0.2}}] * DRAIN, conn=conn)
        wait_for(lambda: len(ledger.runs(path)) >= 3 * WORKERS, 60, "the drain running on every host")
        lost = cluster.hosts[0]
        cli = lost.run([sys.executable, "-m", "jobq", "bulk", "cancel", "--queue", "bulk"], tmp_path / "cli.log")
        operation_id = wait_for(lambda: conn.execute(
            "SELECT id FROM jobq_operations WHERE matched > 0").fetchone(), 60, "the bulk cancel's first chunk")[0]
        killed_at = kill_mid_run(lost, path)
        cli.wait(timeout=SLACK)
        wait_for(lambda: not sessions_of(conn, lost), SLACK, "the lost host's sessions ended")
        with conn.transaction():  # one snapshot: the operation as its last commit left it, and the jobs
            state, matched, changed, skipped, cursor = conn.execute(OPERATION, (operation_id,)).fetchone()
            cancelled_then = conn.execute(CANCELLED).fetchone()[0]
        assert state == "running" and 0 < matched < BULK, "the operation finished before the kill: seed more"
        assert (changed, skipped, cancelled_then) == (matched, 0, matched)  # nothing half-applied
        below = conn.execute("SELECT count(*) FROM jobs WHERE queue = 'bulk' AND id <= %s AND status <> 'cancelled'",
                             (cursor,)).fetchone()[0]
        assert below == 0  # every job up to the cursor is done with; every one after it is untouched

        finished = wait_for(lambda: (op := operations.get(operation_id, conn=conn)).state != "running" and op,
                            60, "the operation resumed and finished by the new leader")
        wait_for(lambda: jobq.counts(conn=conn).depth["done"] == DRAIN, 60, "the drain done, the lost host's elsewhere")
        resumed_by = [host.name for host in cluster.hosts[1:] if f"operation.resumed operation={operation_id}" in host.daemon.log()]
        audit = conn.execute("SELECT counts->>'state' FROM jobq_audit WHERE action = 'bulk_cancel' ORDER BY id").fetchall()
        runs = ledger.runs(path)
        cut_off = killed_runs(runs, lost.name, killed_at)
        counts = ledger.tally("host lost mid-bulk-cancel", conn, runs, DRAIN, **{
            "bulk matched": finished.matched, "bulk changed": finished.changed, "bulk skipped": finished.skipped,
            "cancelled": conn.execute(CANCELLED).fetchone()[0], "runs killed with the host": cut_off})
    assert cli.returncode == -9
    assert len(resumed_by) == 1, resumed_by
    assert (finished.state, finished.matched, finished.changed, finished.skipped) == ("done", BULK, BULK, 0)
    assert counts["cancelled"] == BULK
    assert audit == [("running",), ("done",)]  # started by the lost host's CLI, finished by the new leader
    assert (counts["lost"], counts["overlapping runs"], counts["recorded done"]) == (0, 0, DRAIN)
    assert cut_off >= 1  # kill_mid_run caught one running


def sessions_of(conn: psycopg.Connection, host: Host) -> int:
    """How many sessions the server has from ``host``'s address."""
    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE client_addr = %s::inet",
                        (host.address,)).fetchone()[0]


def test_fan_ins_whose_parents_ran_on_a_lost_host_release_each_callback_once_after_all_parents(cluster, tmp_path):
    path = tmp_path / "ledger"
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        start_leader_first(cluster, tmp_path, conn, path)
        callbacks = set()
        for f in range(FAN_INS):
            wf = jobq.Workflow(name=f"fan-in-{f}")
            parents = [wf.add("held", {"seconds": PARENT_SECONDS}, name=f"parent-{i}") for i in range(PARENTS)]
            wf.add("held", {"seconds": 0.01}, after=parents, name="callback")
            callbacks.add(wf.enqueue(conn=conn).jobs["callback"].id)
        enqueued = FAN_INS * (PARENTS + 1)
        wait_for(lambda: jobq.counts(conn=conn).depth["done"] >= enqueued // 3, 60, "a third of the fan-ins' jobs done")
        lost = cluster.hosts[0]
        killed_at = kill_mid_run(lost, path)
        wait_for(lambda: jobq.counts(conn=conn).depth["done"] == enqueued, 60 + SLACK, "every job done")
        runs = ledger.runs(path)
        cut_off = killed_runs(runs, lost.name, killed_at)
        by_job: dict[int, list[ledger.Run]] = {}
        for run in runs:
            by_job.setdefault(run.job_id, []).append(run)
        parents_of = dict(conn.execute(
            "SELECT c.job_id, array_agg(p.job_id) FROM jobq_workflow_steps AS c JOIN jobq_workflow_edges AS e "
            "ON e.workflow_id = c.workflow_id AND e.child = c.name JOIN jobq_workflow_steps AS p "
            "ON p.workflow_id = e.workflow_id AND p.name = e.parent WHERE c.name = 'callback' GROUP BY c.job_id"
        ).fetchall())
        early = sum(min(r.started for r in by_job[callback]) <= max(r.ended for p in parents_of[callback] for r in by_job[p])
                    for callback in callbacks)
        callbacks_run_again = sum(len(by_job[callback]) > 1 for callback in callbacks)
        rerun_after_kill = sum(len(by_job[c]) > 1 and by_job[c][0].how == "killed" for c in callbacks)
        results = [len(r or {}) for (r,) in conn.execute("SELECT parent_results FROM jobs WHERE id = ANY(%s)",
                                                           (list(callbacks),))]
        edges_done = conn.execute("SELECT count(*) FROM jobq_workflow_edges WHERE outcome = 'done'").fetchone()[0]
        counts = ledger.tally("host lost mid-fan-in", conn, runs, enqueued, **{
            "callbacks released": sum(bool(by_job.get(c)) for c in callbacks), "callbacks run before a parent ended": early,
            "callbacks run twice": callbacks_run_again, "runs killed with the host": cut_off})
    assert (counts["lost"], counts["overlapping runs"], counts["recorded done"]) == (0, 0, enqueued)
    assert cut_off >= 1  # the lost host was running parents (or callbacks) when it died
    assert counts["callbacks released"] == FAN_INS and early == 0
    assert callbacks_run_again == rerun_after_kill  # a callback ran again only if its first run died with the host
    assert results == [PARENTS] * FAN_INS and edges_done == FAN_INS * PARENTS  # each parent's result copied in once
