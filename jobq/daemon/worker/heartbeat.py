"""A worker's heartbeat thread.

Every HEARTBEAT tick it keeps the worker's row in ``workers`` and its in-flight jobs'
``heartbeat_at`` fresh, on the claim session, also while the main thread is inside
a CPU-bound handler (pure Python gives up the interpreter every few milliseconds).
Every TICK it checks that the parent supervisor is alive and that the running job is
not past its deadline (the supervisor kills the worker there; a worker that outlives
it by DEADLINE_GRACE, because the report never reached the supervisor, kills itself),
writes the outcomes that have waited too long while the main thread runs a handler
(:mod:`jobq.daemon.worker.outcomes`: the hand-off of :mod:`jobq.daemon.worker.flight`),
and applies the batch's long-job rule (:meth:`~jobq.daemon.worker.flight.InFlight.overdue`):
the outcomes waiting are written, the running job is marked running, and the jobs
waiting behind it are given back. And every PROGRESS_EVERY at most, it writes the
running job's latest ``jobq.progress``. Everything it knows of the jobs it asks the
worker's :class:`~jobq.daemon.worker.flight.InFlight`.

A write of outcomes that fails for a reason of the statement's own (not a lost
connection: the session retries those) returns them to the buffer, and the heartbeat
leaves them to the main thread until its next beat: the main thread meets the same
error with its next write and leaves as for any database error.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

import psycopg

from jobq.jobs import leases
from jobq.schedules import declarations
from jobq.handlers import context
from jobq.daemon import presence
from jobq.daemon.worker.flight import InFlight
from jobq.daemon.worker.outcomes import OutcomeWriter
from jobq.daemon.worker.session import ClaimSession
from jobq.errors import DatabaseUnavailable
from jobq.store.connections import Connection

log = logging.getLogger(__name__)

TICK = 0.025
# Past its job's deadline by this much, a worker that the supervisor has not killed
# (the report of the job never reached it) kills itself, as the supervisor would have.
DEADLINE_GRACE = 1.0


class Heartbeat(threading.Thread):
    def __init__(
        self,
        session: ClaimSession,
        in_flight: InFlight,
        outcomes: OutcomeWriter,
        *,
        worker_id: str,
        announce: Callable[[Connection], None],
        interval: float,
        parent_pid: int,
        orphaned: Callable[[], None],
        lost: Callable[[int, str], object] = lambda job_id, reason: None,
        long_job: Callable[[float], object] = lambda elapsed: None,
    ) -> None:
        """``announce`` registers the worker's row again (when it was removed as stale);
        ``orphaned`` is called (from this thread) once the parent process is gone;
        ``lost`` with each job whose lease a beat found taken away (the lifeline stops
        its handler if it runs); ``long_job`` with the seconds it has run, when a job of
        the batch turned out long (the worker's turn at the cores is over:
        :mod:`jobq.daemon.boards.cores`)."""
        super().__init__(name="jobq-heartbeat", daemon=True)
        self.session = session
        self.in_flight = in_flight
        self.outcomes = outcomes
        self.worker_id = worker_id
        self.announce = announce
        self.interval = interval
        self.parent_pid = parent_pid
        self.orphaned = orphaned
        self.lost = lost
        self.long_job = long_job
        self.done = threading.Event()
        self.progress_written: context.Progress | None = None
        self.next_progress = 0.0
        self.write_outcomes_from = 0.0  # monotonic: after a failed write, the next beat

    def run(self) -> None:
        next_beat = time.monotonic()
        while not self.done.wait(TICK):
            try:
                if os.getppid() != self.parent_pid:
                    self.orphaned()
                if self.in_flight.past_deadline(DEADLINE_GRACE):
                    log.error("job.timed_out id=%s worker=%s: not killed by the supervisor; killing itself",
                              self.in_flight.snapshot().running, self.worker_id)
                    os.kill(os.getpid(), signal.SIGKILL)
                if self.in_flight.due():
                    self.write_outcomes()
                self.mark_long_job()
                self.write_progress()
                if time.monotonic() >= next_beat:
                    self.beat()
                    next_beat = time.monotonic() + self.interval
            except DatabaseUnavailable:
                return  # asked to stop while the database was down
            except Exception:  # the heartbeat must outlive any one failure; the main thread decides
                log.exception("worker.heartbeat_failed worker=%s", self.worker_id)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)

    def write_outcomes(self) -> None:
        """Write the outcomes buffered, unless a write of them failed since the last beat."""
        if time.monotonic() < self.write_outcomes_from:
            return
        try:
            self.outcomes.write(self.session)
        except psycopg.Error:
            self.write_outcomes_from = time.monotonic() + self.interval
            raise

    def beat(self) -> None:
        def write(conn, _retried):  # type: ignore[no-untyped-def]
            now = self.in_flight.snapshot()  # under the session lock: what the database has
            if not presence.beat(conn, self.worker_id, now.running, now.recorded):
                self.announce(conn)
                presence.declare(conn, self.worker_id, declarations.hashes())
            self.session.lock_budget = presence.lock_budget(conn, self.worker_id)
            return leases.heartbeat(conn, now.held).result() if now.held else set()

        lost = self.session.run(write)
        for job_id in sorted(lost):
            if self.in_flight.was_cancelled(job_id):
                continue  # an operator's cancel took it: said where it is acted on
            log.warning("job.lost id=%s worker=%s: its lease was taken away", job_id, self.worker_id)
            self.lost(job_id, "its lease was taken away")

    def write_progress(self) -> None:
        """The running job's latest progress, if it changed and PROGRESS_EVERY has passed
        since the last write."""
        running = self.in_flight.running_progress()
        if running is None:
            return
        claim, progress = running
        if progress == self.progress_written or time.monotonic() < self.next_progress:
            return
        if self.session.run(lambda conn, _: leases.set_progress(conn, claim, progress.json)):
            log.debug("job.progress id=%s worker=%s progress=%s", claim.job_id, self.worker_id, progress.json)
        self.progress_written = progress
        self.next_progress = time.monotonic() + context.PROGRESS_EVERY

    def mark_long_job(self) -> None:
        overdue = self.in_flight.overdue()
        if overdue is None:
            return
        self.long_job(overdue.elapsed)
        self.write_outcomes()  # what finished before it is recorded first
        self.session.run(lambda conn, _: leases.start(conn, [overdue.claim], [overdue.elapsed]).result())
        self.session.give_back(overdue.waiting)
