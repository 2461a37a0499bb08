"""A worker's lifeline: the thread that stops a handler whose job is no longer the
worker's own.

A job stops being the worker's own in three ways, and in each its handler is stopped as
an operator's cancel stops it (:class:`jobq.Cancelled` raised in the handler at once,
the worker killed if the handler has not returned JOBQ_CANCEL_GRACE seconds later):

- the heartbeat finds its lease taken away (an operator's cancel whose notification was
  lost, the stale reaper's reclaim) (:meth:`Lifeline.lose`, from the heartbeat);
- a reconnect of the claim session finds its lease changed (from the session);
- the claim session's connection has been dead for JOBQ_DEAD_CONNECTION_TIMEOUT
  (:meth:`~jobq.daemon.worker.session.ClaimSession.dead_for`): the server may soon end
  the session and free the job's advisory lock, and another host may claim the job.
  The server is asked to wait longer than this timeout plus the grace plus a margin
  (:func:`jobq.store.keepalive.server_dead_connection_timeout`), so that the kill
  always comes before the lock is freed: two runs of one job never overlap.

A stopped run is a failed run that says why (:mod:`jobq.handlers.execution`): written
under its lease like any other, refused when the lease is gone. The kill is the
worker's own (SIGKILL of itself, as for a deadline the supervisor missed): it must
not depend on a database, a pipe or a supervisor that may be cut off with it. This
thread never touches the database: it keeps its time while every other thread of the
worker may be stuck on a dead connection.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from jobq.daemon.worker.flight import Flight, InFlight
from jobq.handlers import context
from jobq.daemon.worker.session import ClaimSession

log = logging.getLogger(__name__)

TICK = 0.025


class Lifeline(threading.Thread):
    def __init__(
        self, session: ClaimSession, in_flight: InFlight, *, worker_id: str, dead_after: float, grace: float
    ) -> None:
        """``dead_after``: JOBQ_DEAD_CONNECTION_TIMEOUT (0: connections are not watched);
        ``grace``: JOBQ_CANCEL_GRACE."""
        super().__init__(name="jobq-lifeline", daemon=True)
        self.session = session
        self.in_flight = in_flight
        self.worker_id = worker_id
        self.dead_after = dead_after
        self.grace = grace
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._stopped: tuple[Flight, float] | None = None  # the run stopped, and when (monotonic)

    def beat_interval(self, heartbeat_interval: float) -> float:
        """The heartbeat's interval: a dead connection is noticed only by a call that
        goes out, so while connections are watched one goes out at least every third of
        JOBQ_DEAD_CONNECTION_TIMEOUT."""
        return min(heartbeat_interval, self.dead_after / 3) if self.dead_after else heartbeat_interval

    def interrupting(self) -> bool:
        """Whether the worker's control signal is to raise :class:`jobq.Cancelled` now:
        the handler running now is one this thread stopped. Signal-safe: no lock."""
        flight = self.in_flight.running()
        run = flight.run if flight is not None else None
        return run is not None and run.stopped is not None and context.current() is run

    def run(self) -> None:
        while not self.done.wait(TICK):
            try:
                self.check()
            except Exception:  # the lifeline must outlive any one failure
                log.exception("worker.lifeline_failed worker=%s", self.worker_id)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)

    def check(self) -> None:
        """Stop the running handler if the connection has been dead too long; kill the
        worker if a stopped handler outlived the grace."""
        dead = self.session.dead_for()
        if self.dead_after and dead >= self.dead_after:
            flight = self.in_flight.running()
            if flight is not None:
                self.lose(flight.job_id, f"its database connection has been dead for {dead:.1f} s")
        with self._lock:
            stopped = self._stopped
        if stopped is None:
            return
        flight, at = stopped
        if self.in_flight.running() is not flight:
            with self._lock:
                if self._stopped is stopped:
                    self._stopped = None  # it returned
            return
        if time.monotonic() - at > self.grace:
            log.error("job.stop_killed id=%s worker=%s grace=%ss: its handler did not return; killing itself",
                      flight.job_id, self.worker_id, f"{self.grace:g}")
            os.kill(os.getpid(), signal.SIGKILL)

    def lose(self, job_id: int, reason: str) -> bool:
        """``job_id`` is no longer this worker's own: if its handler runs now, stop it
        (Cancelled raised in it through the worker's control signal; killed after the
        grace). True if a handler was stopped now. Any thread but a signal handler."""
        flight = self.in_flight.running()
        if flight is None or flight.job_id != job_id or flight.run is None:
            return False
        with self._lock:  # the heartbeat and this thread may both find it lost
            if flight.run.stopped is not None:
                return False
            flight.run.stopped = reason
            flight.run.cancel_requested = True
            self._stopped = (flight, time.monotonic())
        log.warning("job.stopped id=%s worker=%s: %s; its handler is stopped", job_id, self.worker_id, reason)
        os.kill(os.getpid(), signal.SIGUSR1)  # the worker's control signal: handle_control raises Cancelled
        return True
