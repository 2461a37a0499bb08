"""One-way drops across three hosts for real (support.netns), counted with the file
ledger of handler starts and ends by host.

A host that hears nothing from the database while its own packets still arrive
(``deafen``) is the nastiest half of a partition: its queries run and commit (a claim,
a heartbeat, an outcome), and it never learns that they did. The other half (``mute``:
the host hears the database, the database hears nothing of it) leaves the server with
answers nobody acknowledges. Either way the host's claim session dies on its side
after JOBQ_DEAD_CONNECTION_TIMEOUT and its handlers are stopped; the server ends the
session, freeing its jobs' locks, only after the timeout + the grace + the margin; the
jobs finish on the other hosts. Nothing lost, no two runs of a job at once, no outcome
recorded twice (a commit whose answer was lost is written again after the reconnect
and refused by its lease, never counted a second time).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import psycopg
import pytest

import jobq
from support import ledger
from support.netns import Host
from support.waiting import wait_for
from test_hosts_partition import SERVER_DEAD, SETTINGS, SLACK

pytestmark = [pytest.mark.db, pytest.mark.hosts]

WORKERS = 4
LONG = 6.0  # seconds: a long job's run, cut off mid-run
LONG_JOBS = 3 * WORKERS - 3  # more than two hosts' workers: every host runs one at the cut
SHORT = 0.02  # seconds: a short job's run; a stream of them is finishing at the cut
SHORT_JOBS = 1500
# A client on a host: connects (the client gives up on data unacknowledged for 2 s), says
# so, waits for a line, then inserts its argument and says whether the answer came.
PROBE = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True, connect_timeout=5, tcp_user_timeout=2000)
conn.execute("SELECT 1")
print("connected", flush=True)
sys.stdin.readline()
try:
    conn.execute("INSERT INTO probe VALUES (%s)", (sys.argv[2],))
    print("answered", flush=True)
except psycopg.OperationalError:
    print("no answer", flush=True)
"""


def probe(host: Host, fault: str | None, tag: str) -> str:
    """What the host's client saw of an insert sent after ``fault`` was done to the host."""
    client = subprocess.Popen(["ip", "netns", "exec", host.namespace, sys.executable, "-c", PROBE,
                               host.database_url, tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline() == "connected\n"
        if fault is not None:
            getattr(host, fault)()
        client.stdin.write("go\n")
        client.stdin.flush()
        return client.communicate(timeout=SLACK)[0].strip()
    finally:
        client.kill()
        client.wait()


def test_deafen_runs_the_hosts_statements_unanswered_and_mute_never_delivers_them(cluster):
    """The harness's one-way drops do what they say, to a client's insert: deafened, it
    is carried out and its answer never comes; muted, it never arrives; healed, both ways."""
    host = cluster.hosts[0]
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("CREATE TABLE probe (tag text)")
        seen = {"deafen": probe(host, "deafen", "deaf")}
        host.heal()
        seen["mute"] = probe(host, "mute", "mute")
        host.heal()
        seen["healed"] = probe(host, None, "healed")
        inserted = sorted(tag for (tag,) in conn.execute("SELECT tag FROM probe"))
    assert seen == {"deafen": "no answer", "mute": "no answer", "healed": "answered"}
    assert inserted == ["deaf", "healed"]


@pytest.mark.chaos
def test_one_way_drops_lose_nothing_and_no_two_runs_of_a_job_overlap(cluster, tmp_path):
    """Two rounds, a drain of long and short jobs each: host1 deafened, then host2 muted."""
    path = tmp_path / "ledger"
    for host in cluster.hosts:
        host.start(tmp_path, WORKERS, **SETTINGS, **{ledger.ENV: str(path)})
    enqueued = 0
    cut_off: dict[str, int] = {}
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        wait_for(lambda: conn.execute("SELECT count(*) FROM workers").fetchone()[0] == 3 * WORKERS, 60,
                 "every host's workers registered")
        for fault, host in (("deafen", cluster.hosts[0]), ("mute", cluster.hosts[1])):
            long_jobs = {job.id for job in jobq.enqueue_many(
                [{"type": "held", "payload": {"seconds": LONG}}] * LONG_JOBS, conn=conn)}
            jobq.enqueue_many([{"type": "held", "payload": {"seconds": SHORT}}] * SHORT_JOBS, conn=conn)
            enqueued += LONG_JOBS + SHORT_JOBS
            wait_for(lambda: {r.job_id for r in ledger.runs(path)} >= long_jobs, 60, "every long job running")
            wait_for(lambda: jobq.counts(conn=conn).depth["done"] >= enqueued - SHORT_JOBS + 100, 60,
                     "short jobs finishing")
            running = [r for r in ledger.runs(path) if r.ended is None and r.host == host.name]
            getattr(host, fault)()
            wait_for(lambda: jobq.counts(conn=conn).depth["done"] == enqueued,
                     SERVER_DEAD + 3 * LONG + 3 * SLACK, f"{fault}: every job done, those cut off on other hosts")
            cut_off[fault] = sum(r.job_id in long_jobs for r in running)
            host.heal()
        runs = ledger.runs(path)
        ran_twice = sum(n > 1 for n in Counter(r.job_id for r in runs).values())
        counts = ledger.tally("one-way drops", conn, runs, enqueued, **{
            "long jobs cut off mid-run": sum(cut_off.values()), "ran again after a cut": ran_twice,
            "late writes refused": jobq.counts(conn=conn).totals.get("stale_lease_rejections_total", 0)})
    assert all(n >= 1 for n in cut_off.values()), cut_off
    assert (counts["done"], counts["lost"], counts["overlapping runs"], counts["recorded done"]) == (
        enqueued, 0, 0, enqueued)
    stopped = {host.name: host.daemon.log().count("job.stopped") for host in cluster.hosts[:2]}
    assert stopped["host1"] >= cut_off["deafen"] and stopped["host2"] >= cut_off["mute"], stopped
