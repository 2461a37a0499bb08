"""Three hosts for real (support.netns): network partitions and whole-host faults,
each counted with a ledger of every handler start and end, by host (support.ledger).

The guarantee under test: a handler is started by at most one worker at a time, also
across a partition. A host cut off stops its handlers once its claim sessions have
been dead for JOBQ_DEAD_CONNECTION_TIMEOUT and kills what has not returned after
JOBQ_CANCEL_GRACE; the server ends the silent sessions (freeing the jobs' advisory
locks, so that another host may take them back) only after the timeout + the grace +
a margin. So a job re-run elsewhere never runs at the same time as its first run.
"""

from __future__ import annotations

import psycopg
import pytest

import jobq
from jobq.store.keepalive import SERVER_MARGIN
from support import ledger
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.chaos, pytest.mark.hosts]

DEAD = 3.0  # JOBQ_DEAD_CONNECTION_TIMEOUT
GRACE = 2.0  # JOBQ_CANCEL_GRACE
SERVER_DEAD = DEAD + GRACE + SERVER_MARGIN  # when the server ends a cut-off host's sessions
SLACK = 15.0  # a loaded machine: deadlines are generous, never a measure of speed
SETTINGS = {"JOBQ_DEAD_CONNECTION_TIMEOUT": f"{DEAD:g}", "JOBQ_CANCEL_GRACE": f"{GRACE:g}"}


def test_long_jobs_cut_off_mid_run_by_partitions_never_overlap_and_all_finish_once(cluster, tmp_path):
    """Two rounds: every worker of the three hosts runs a long job; two hosts are cut
    off; their jobs are taken back by the third host only after their first runs were
    stopped, and all finish, each recorded done once."""
    path = tmp_path / "ledger"
    workers = 13
    env = {**SETTINGS, ledger.ENV: str(path)}
    for host in cluster.hosts:
        host.start(tmp_path, workers, **env)
    url = cluster.url()
    cut_off = 0
    enqueued = 0
    with psycopg.connect(url, autocommit=True) as conn:
        wait_for(lambda: conn.execute("SELECT count(*) FROM workers").fetchone()[0] == 3 * workers, 60,
                 "every host's workers registered")
        for round, (a, b) in enumerate([(0, 1), (1, 2)]):
            started = len(ledger.runs(path))
            jobq.enqueue_many([{"type": "held", "payload": {"seconds": 6}}] * (3 * workers), conn=conn)
            enqueued += 3 * workers
            wait_for(lambda: len(ledger.runs(path)) >= started + 3 * workers, 60, "a job running on every worker")
            running = ledger.running_by_host(ledger.runs(path))
            cut = (cluster.hosts[a], cluster.hosts[b])
            cut_off += sum(running.get(host.name, 0) for host in cut)
            for host in cut:
                host.partition()
            wait_for(lambda: jobq.counts(conn=conn).depth["done"] == enqueued, SERVER_DEAD + 3 * 6 + 3 * SLACK,
                     f"round {round}: every job done, those cut off on other hosts")
            for host in cut:
                host.heal()
        totals = jobq.counts(conn=conn).totals
        done = conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0]
    runs = ledger.runs(path)
    overlaps = ledger.overlapping(runs)
    print(f"\npartition | enqueued {enqueued} | cut off mid-run {cut_off} | done {done} | "
          f"lost {enqueued - done} | overlapping runs {len(overlaps)} | recorded done {totals['done_total']} | "
          f"runs by host {dict(ledger.per_host(runs))} | "
          f"stopped by a dead connection {sum(h.daemon.log().count('database connection has been dead') for h in cluster.hosts)}")
    assert cut_off >= 50
    assert overlaps == []
    assert done == enqueued and totals["done_total"] == enqueued  # nothing lost, each outcome recorded once
