"""Cancels acknowledged around database restarts stop their handlers.

A cancel's NOTIFY is lost when the maintenance process's control listener is away (a
restart: the notification of a cancel committed just before the crash, and every
cancel committed after the restart until it listens again). The listener asks for
those cancels once it listens again, and each worker's heartbeat finds the lease of a
job cancelled under it changed: either way the handler gets jobq.Cancelled, and its
worker is killed JOBQ_CANCEL_GRACE seconds later if it has not returned. The grace runs
from when the worker can hear of the cancel: at once, or, for a cancel acknowledged just
before a crash, once the server answers again and the sessions are back (a crash and
recovery take seconds on a loaded machine).

The ledger is a file (support.ledger): it keeps counting while the database is down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import jobq
from jobq.store.embedded import EmbeddedPostgres
from support import db, ledger
from support.daemon import lines_naming
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.chaos, pytest.mark.control]

GRACE = 5.0  # JOBQ_CANCEL_GRACE
WORKERS = 8
CANCELS = 120  # acknowledged cancels of started jobs, around two restarts
RESTART_AT = (30, 75)  # after this many acknowledged cancels, the database restarts (immediate)
SLACK = 10.0


class Canceller(threading.Thread):
    """Cancels started jobs one after another, as fast as the database answers, and
    records when each cancel was acknowledged (its commit returned)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.acked: dict[int, float] = {}  # job id -> wall-clock time of the acknowledgement
        self.failures = 0  # cancels that failed (database down): not acknowledged
        self.done = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection | None = None
        while not self.done.is_set() and len(self.acked) < CANCELS:
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
                row = conn.execute(
                    "SELECT id FROM jobs WHERE status IN ('claimed', 'running') AND id <> ALL(%s) "
                    "ORDER BY random() LIMIT 1", (list(self.acked),)).fetchone()
                if row is None:
                    time.sleep(0.02)
                    continue
                jobq.cancel(row[0], conn=conn)
                self.acked[row[0]] = time.time()
                time.sleep(0.03)
            except (psycopg.Error, jobq.errors.DatabaseUnavailable, jobq.errors.Conflict):
                self.failures += 1
                time.sleep(0.05)
        if conn is not None:
            conn.close()


@pytest.fixture
def durable_postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of the test's own that keeps what it acknowledged across a crash (the
    test servers' fsync and synchronous_commit are off: an immediate stop would lose the
    last commits, acknowledged cancels among them)."""
    with db.migrated_instance(tmp_path / "durable-pg", fsync="on", synchronous_commit="on") as server:
        yield server


def test_every_cancel_acknowledged_around_two_restarts_stops_its_handler_within_the_grace(
    durable_postgres, daemon, tmp_path
):
    own_postgres = durable_postgres
    url = own_postgres.url()
    path = tmp_path / "ledger"
    with psycopg.connect(url, autocommit=True) as conn:
        jobq.enqueue_many([{"type": "held", "payload": {}}] * (CANCELS + 4 * WORKERS), conn=conn)
    d = daemon(WORKERS, url=url, JOBQ_CANCEL_GRACE=str(GRACE), **{ledger.ENV: str(path)})
    wait_for(lambda: len(ledger.runs(path)) >= WORKERS, 60, "every worker running a job")
    canceller = Canceller(url)
    canceller.start()
    restarts: list[tuple[float, float]] = []  # wall-clock: the crash, the server answering again
    try:
        for at in RESTART_AT:
            # Not a failure if it never comes: workers kept busy by handlers never stopped
            # leave nothing new to cancel, and the assertions below say why.
            deadline = time.monotonic() + 60
            while len(canceller.acked) < at and time.monotonic() < deadline:
                time.sleep(0.05)
            crashed = time.time()
            own_postgres.stop(mode="immediate")
            own_postgres.start()
            restarts.append((crashed, time.time()))
        canceller.join(timeout=60)  # (handlers never stopped would keep every worker busy: fewer cancels)
    finally:
        canceller.done.set()
        canceller.join(timeout=10)
    def heard_by(acked: float) -> float:
        """When a cancel acknowledged at ``acked`` can be heard by its worker at the latest:
        at once, or, acknowledged within a grace before a crash (its notification may be
        lost with the server, and no heartbeat gets through until the server is back),
        once the sessions are back: the restart, then reconnects within SLACK."""
        for crashed, answering in restarts:
            if crashed - GRACE <= acked <= answering:
                return answering + SLACK
        return acked

    # Until every cancelled handler has ended, or had its grace from when it could hear of it.
    last_due = max(heard_by(acked) for acked in canceller.acked.values()) + GRACE + 1
    wait_for(lambda: time.time() > last_due or all(
        run.ended for run in ledger.runs(path) if run.job_id in canceller.acked), last_due - time.time() + SLACK,
        "every cancelled handler ended, or past its grace")
    runs = {run.job_id: run for run in ledger.runs(path) if run.job_id in canceller.acked}
    late = {job_id: (run.ended or time.time()) - canceller.acked[job_id]
            for job_id, run in runs.items() if (run.ended or time.time()) > heard_by(canceller.acked[job_id]) + GRACE}
    delays = sorted(max(0.0, run.ended - canceller.acked[job_id]) for job_id, run in runs.items() if run.ended) or [0.0]
    print(f"\ncancels acknowledged {len(canceller.acked)} (failed while down: {canceller.failures}), "
          f"handlers started {len(runs)}, ended {len(delays)}, "
          f"ack -> handler end: median {delays[len(delays) // 2]:.3f} s, max {delays[-1]:.3f} s; "
          f"missed cancels found after reconnect: {d.log().count('maintenance.missed_cancels')}, "
          f"stopped by a lost lease: {d.log().count('its lease was taken away; its handler is stopped')}")
    assert late == {}, (f"handlers running past JOBQ_CANCEL_GRACE after an acknowledged cancel: {late}\n"
                        + story(late, canceller.acked, restarts, path, d.log()))
    assert len(canceller.acked) >= CANCELS, f"only {len(canceller.acked)} cancels acknowledged"
    with psycopg.connect(url, autocommit=True) as conn:
        statuses = dict(conn.execute("SELECT status, count(*) FROM jobs WHERE id = ANY(%s) GROUP BY status",
                                     (list(canceller.acked),)).fetchall())
    assert statuses == {"cancelled": len(canceller.acked)}
    log = d.log()
    assert log.count("worker.reconnected") >= 2 * WORKERS  # both restarts really cut every claim session


def story(late: dict[int, float], acked: dict[int, float], restarts: list[tuple[float, float]], path: Path,
          log: str) -> str:
    """What the ledger and the daemon's log say of each late job: for a failure to be read."""
    told = [f"restarts (crash, answering): {restarts}"]
    for job_id in late:
        told.append(f"job {job_id} acknowledged at {acked[job_id]:.6f}; its ledger lines:")
        told += [f"  {line}" for line in path.read_text().splitlines() if line.split()[1] == str(job_id)]
        told += [f"  {line}" for line in lines_naming(log, job_id)]
    return "\n".join(told)
