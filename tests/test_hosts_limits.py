"""Flow control across a partition, three hosts for real (support.netns), counted with
the file ledger of handler starts and ends by host (support.ledger).

One limited queue (concurrency 3) served by three workers on each host (nine in all,
three times the queue's limit), its jobs spread over four tenants of ``tenant:*`` at
concurrency 1. host1 starts alone and takes the queue's three slots with long jobs; the
two other hosts start and the rest of the jobs are enqueued; host1 is cut off (link
down) mid-run. It stops its handlers once its sessions have been dead for
JOBQ_DEAD_CONNECTION_TIMEOUT; the server ends those sessions only after the timeout, the
grace and a margin, and only then are the jobs' advisory locks gone and their slots free
for the reaper to take back (docs/limits.md): until then the two other hosts, with six
idle workers and thirteen jobs waiting, run nothing. The link comes back once the
server has ended the sessions, and the queue is finished by whichever hosts claim
first (host1, back, may keep the queue's three slots: a worker writes its outcomes,
the stopped runs' failures too, and claims again in one transaction).
So at no instant do more runs of a key or of the queue overlap than
its limit, across hosts, counting the cut-off host's runs until their handler really
ended (its end line; for a run killed without one, when its process was seen gone).
And no slot of a job was freed before the run that held it had ended (test_slot_frees,
support.spans: the database's clock, the same machine's as the ledger's).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

import jobq
from support import ledger
from support.spans import SLOT_FREES_CREATE
from support.daemon import alive
from support.waiting import wait_for
from test_hosts_lost import sessions_of
from test_hosts_partition import SERVER_DEAD, SETTINGS, SLACK

pytestmark = [pytest.mark.db, pytest.mark.chaos, pytest.mark.hosts, pytest.mark.limits]

WORKERS = 3  # per host
QUEUE, QUEUE_LIMIT = "limited", 3
TENANTS, KEY_LIMIT, PER_TENANT = 4, 1, 4
SECONDS = 4.0  # each later job's run
LONG = 10.0  # the first three: still running when the host is cut off, and longer than JOBQ_DEAD_CONNECTION_TIMEOUT


class Deaths:
    """When each process of a run without an end line was first seen gone (polled from
    the test process, every 50 ms): the latest its handler can have ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Deaths:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            for run in ledger.runs(self.path):
                if run.ended is None and run.pid not in self.seen and not alive(run.pid):
                    self.seen[run.pid] = time.time()


def spans(runs: list[ledger.Run], deaths: dict[int, float], now: float) -> list[tuple[ledger.Run, float]]:
    """Each run with the instant its handler ended: its end line; else the earliest of its
    process seen gone and the next start in that process (a worker runs one handler at a
    time); else ``now`` (still running: counted as overlapping everything after it)."""
    out = []
    for run in runs:
        if run.ended is not None:
            out.append((run, run.ended))
            continue
        later = [r.started for r in runs if r.pid == run.pid and r.started > run.started]
        bounds = later + ([deaths[run.pid]] if run.pid in deaths else [])
        out.append((run, min(bounds) if bounds else now))
    return out


def peaks(spanned: list[tuple[ledger.Run, float]], scope_of: dict[int, str | None]) -> dict[str, int]:
    """The most runs under way at one instant per scope (a key, or the queue): a sweep over
    starts and ends, an end before a start at the same instant."""
    events = sorted((at, d, scope_of[run.job_id]) for run, until in spanned if scope_of.get(run.job_id) is not None
                    for at, d in ((run.started, 1), (until, -1)))
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    for _, d, scope in events:
        running[scope] += d
        most[scope] = max(most[scope], running[scope])
    return dict(most)


def test_limits_hold_across_a_partitioned_host_whose_limited_jobs_were_cut_off_mid_run(cluster, tmp_path):
    path = tmp_path / "ledger"
    env = {**SETTINGS, ledger.ENV: str(path), "JOBQ_QUEUES": QUEUE}
    enqueued = TENANTS * PER_TENANT
    with psycopg.connect(cluster.url(), autocommit=True) as conn, Deaths(path) as deaths:
        conn.execute(SLOT_FREES_CREATE)  # test_slot_frees: each slot's freeing, by a trigger (support.spans)
        jobq.set_queue_limits(QUEUE, concurrency=QUEUE_LIMIT, conn=conn)
        jobq.set_limit("tenant:*", concurrency=KEY_LIMIT, conn=conn)
        cut, others = cluster.hosts[0], cluster.hosts[1:]
        cut.start(tmp_path, WORKERS, **env)  # alone at first: the queue's every slot is its own
        jobq.enqueue_many([{"type": "held", "queue": QUEUE, "concurrency_key": f"tenant:{t}", "max_retries": 10,
                            "payload": {"seconds": LONG}} for t in range(QUEUE_LIMIT)], conn=conn)
        wait_for(lambda: ledger.running_by_host(ledger.runs(path)).get(cut.name, 0) == QUEUE_LIMIT, 60,
                 "the queue's limit reached on the host to cut off")
        for host in others:
            host.start(tmp_path, WORKERS, **env)
        wait_for(lambda: conn.execute("SELECT count(*) FROM workers").fetchone()[0] == 3 * WORKERS, 60,
                 "every host's workers registered")
        jobq.enqueue_many([{"type": "held", "queue": QUEUE, "concurrency_key": f"tenant:{t}", "max_retries": 10,
                            "payload": {"seconds": SECONDS}} for _ in range(PER_TENANT) for t in range(TENANTS)
                           ][QUEUE_LIMIT:], conn=conn)
        assert ledger.running_by_host(ledger.runs(path)) == {cut.name: QUEUE_LIMIT}, "the long runs ended early"
        cut.partition()
        partitioned_at = time.time()
        cut_off = ledger.running_by_host(ledger.runs(path)).get(cut.name, 0)
        wait_for(lambda: sessions_of(conn, cut) == 0, SERVER_DEAD + SLACK, "the cut-off host's sessions ended")
        outage = time.time() - partitioned_at
        cut.heal()
        wait_for(lambda: jobq.counts(conn=conn).depth["done"] == enqueued, SERVER_DEAD + enqueued * SECONDS + 3 * SLACK,
                 "every job done, the cut-off ones elsewhere or after the heal")
        wait_for(lambda: conn.execute("SELECT count(*) FROM jobq_limit_slots").fetchone()[0] == 0, SLACK,
                 "every slot freed")
        scope_of = dict(conn.execute("SELECT id, concurrency_key FROM jobs").fetchall())
        runs = ledger.runs(path)
        taken_back = min((r.started for r in runs if r.host != cut.name), default=None)
        spanned = spans(runs, deaths.seen, time.time())
        frees = conn.execute("SELECT job_id, extract(epoch FROM at)::float8 FROM test_slot_frees").fetchall()
        outlived = [(run, until) for run, until in spanned
                    if min((at for job_id, at in frees if job_id == run.job_id and at >= run.started), default=until) < until]
        by_key = peaks(spanned, scope_of)
        by_queue = peaks(spanned, {job_id: QUEUE for job_id in scope_of})
        cut_runs = [run for run in runs if run.host == cut.name and run.started < partitioned_at]
        freed = sorted(round(min(at for job_id, at in frees if job_id == run.job_id and at >= run.started)
                             - partitioned_at, 1) for run in cut_runs)
        ends = Counter(run.how or ("gone" if run.pid in deaths.seen else "none") for run in cut_runs)
        counts = ledger.tally("limits across a partition", conn, runs, enqueued, **{
            "cut off mid-run": cut_off, "max concurrent per key": max(by_key.values()),
            "max concurrent per queue": by_queue.get(QUEUE, 0), "slots freed before their run ended": len(outlived)})
    twice = counts["recorded done"] - counts["done"]
    elsewhere = "none" if taken_back is None else f"{taken_back - partitioned_at:.1f} s after the cut"
    print(f"limits across a partition | outcomes recorded twice {twice} | outage {outage:.1f} s | "
          f"first run elsewhere {elsewhere} | "
          f"cut-off runs ended {dict(ends)} | their slots freed {freed} s after the cut | peaks per key {by_key}")
    assert cut_off == QUEUE_LIMIT
    assert ends["none"] == 0, "a cut-off run whose end is unknown"
    assert all(most <= KEY_LIMIT for most in by_key.values()), (by_key, spanned)
    assert by_queue[QUEUE] <= QUEUE_LIMIT, (by_queue, spanned)
    assert by_queue[QUEUE] == QUEUE_LIMIT  # the limit was reached: the test bound something
    assert outlived == []  # a slot is freed after its run's end (the outcome; the reaper once the lock is gone)
    assert (counts["lost"], counts["overlapping runs"], twice) == (0, 0, 0)
    assert counts["done"] == enqueued
