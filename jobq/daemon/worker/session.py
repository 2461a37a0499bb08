"""A worker's claim session: the one dedicated connection that claims jobs, writes
their outcomes and heartbeats, and holds their advisory locks.

The worker's main thread and its heartbeat thread share it through :meth:`run`,
which serialises them. When the connection breaks (a database restart, a
terminated backend) the locks are gone with it: :meth:`run` reconnects with
backoff, takes again the lock of every job in flight (it asks the worker's
:class:`~jobq.daemon.worker.flight.InFlight`, and tells it what the re-lock found)
and checks its lease, then calls again, telling the call that it is a retry, until
it goes through or the worker stops.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import psycopg

from jobq.store.sql.leases import CLAIM_SESSION_PLANNER
from jobq.jobs import leases
from jobq.store import connections
from jobq.jobs.leases import Claim
from jobq.limits import claims as limited
from jobq.daemon import presence
from jobq.daemon.worker.flight import InFlight
from jobq.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

# An error that may be a lost connection that libpq has not noticed yet is retried on a
# new connection this many times in one call, then taken for an error of the statement.
UNSURE_RETRIES = 3
SUSPECT_POLL = 0.001  # seconds: check_if_suspect polls the socket at most this often


def connection_lost(exc: psycopg.Error) -> bool:
    """Whether an error on a connection that does not look broken (yet) is in fact the
    connection's end: the server terminated the session or is shutting down (SQLSTATE
    class 08 or 57P), or the client failed without a server error (no SQLSTATE), as
    psycopg's "cannot exit pipeline mode while busy" when the backend was terminated
    in the middle of a pipeline. Retrying on a new connection is safe: every write is
    fenced by its lease, and a retry is told it is one."""
    state = exc.sqlstate
    return state is None or state.startswith(("08", "57P"))


def _ids(job_ids: Iterable[int]) -> str:
    return ",".join(map(str, sorted(job_ids))) or "-"


class ClaimSession:
    def __init__(
        self, url: str, *, worker_id: str, lock_base: int, stopping: threading.Event, in_flight: InFlight
    ) -> None:
        self.url = url
        self.worker_id = worker_id
        self.lock_base = lock_base
        self.stopping = stopping
        self.in_flight = in_flight  # the jobs whose locks this session holds
        self.conn: psycopg.Connection | None = None
        # Serialises the two threads' calls; held by a writer of outcomes from their take
        # to their end, so that the heartbeat never sees a written job as still in flight.
        self.lock = threading.RLock()
        # For dead_for (read without the lock by the lifeline): when the last call that
        # went through was sent (monotonic).
        self.answered_sent = time.monotonic()
        # Told of jobs whose lease a reconnect found changed (the worker's lifeline).
        self.on_lost: Callable[[int, str], object] = lambda job_id, reason: None
        # check_if_suspect's poll of the connection's socket: (fd, poll object) of the last
        # connection polled, made again for a new one (half the cost of a select a job).
        self._polled: tuple[int, Any] | None = None
        self._polled_at = 0.0  # monotonic
        # How many jobs the worker may hold claimed (jobq.daemon.presence.lock_budget):
        # read on every connect, and again by the heartbeat.
        self.lock_budget = 1

    def connect(self) -> None:
        """Open the connection (with a counter slot of its own, :func:`jobq.store.connections.connect_counting`),
        waiting with backoff while the database is down.

        Raises DatabaseUnavailable only when the worker is asked to stop meanwhile.
        """
        backoff = connections.ReconnectDelay()
        while True:
            try:
                name = f"jobq worker {self.worker_id}"
                self.conn = connections.connect_counting(self.url, application_name=name, lock_base=self.lock_base)
                with connections.database_errors():
                    self.conn.execute(CLAIM_SESSION_PLANNER)
                    self.lock_budget = presence.lock_budget(self.conn, self.worker_id)
                return
            except DatabaseUnavailable as exc:
                if self.stopping.is_set():
                    raise
                delay = backoff.next()
                log.warning("worker.db_unavailable worker=%s retry_in=%.1fs error=%s", self.worker_id, delay, exc)
                if self.stopping.wait(delay):
                    raise

    def run(self, call: Callable[[psycopg.Connection, bool], T]) -> T:
        """``call(conn, retried)`` under the session lock. After a broken connection:
        reconnect, re-lock, and call again with ``retried=True``, until it goes through
        or the worker stops (DatabaseUnavailable)."""
        with self.lock:
            retried = False
            unsure = 0  # retries after errors that did not say the connection was lost
            again = 0  # retries after a change made meanwhile (leases.changed_meanwhile)
            while True:
                reconnecting = self.conn is None or self.conn.closed
                sent = time.monotonic()
                try:
                    if reconnecting:
                        self._reconnect()  # inside the retry: the connection may drop while re-locking
                    answer = call(self.conn, retried)  # type: ignore[arg-type]
                    self.answered_sent = sent
                    return answer
                except (psycopg.IntegrityError, psycopg.errors.SerializationFailure) as exc:
                    if not leases.changed_meanwhile(exc) or again >= leases.WRITE_AGAIN_RETRIES:
                        raise
                    again += 1
                    # Partitions moving under a write are routine under load (a claim's
                    # candidate finished elsewhere): DEBUG; a key taken meanwhile is rare: INFO.
                    level = logging.DEBUG if connections.moved_meanwhile(exc) else logging.INFO
                    log.log(level, "worker.changed_meanwhile worker=%s error=%s: written again", self.worker_id,
                            connections.first_line(exc))
                    assert self.conn is not None
                    if reconnecting:
                        self.conn.close()  # the reconnect did not finish: start it again
                    elif self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                        self.conn.rollback()
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    if self.conn is not None and not self.conn.broken and not self.conn.closed:
                        if not connection_lost(exc) or unsure >= UNSURE_RETRIES:
                            raise  # an error of the statement itself, not of the connection
                        unsure += 1
                    log.warning("worker.connection_lost worker=%s error=%s", self.worker_id, connections.first_line(exc))
                    self.conn.close()
                    retried = True

    def check_if_suspect(self) -> None:
        """Before a claimed job starts: when the idle connection has something to read
        (the server ended the session, or restarted: its advisory locks are gone), go
        through it now, so that the reconnect re-locks the batch and a job another
        supervisor's reaper gave back meanwhile is not started. A poll of the socket
        without the session lock (the heartbeat thread may be writing outcomes: a job's
        start never waits for that), a round trip only when it says so (or when the
        heartbeat's own answer was on its way: a harmless extra round trip). At most
        one poll every SUSPECT_POLL seconds (a poll is a system call: a job of short ones
        costs less than it): a session the server ended shows as readable as soon as
        the server goes down, long before its restart lets any reaper in, and a job
        shorter than SUSPECT_POLL is all that may start meanwhile."""
        now = time.monotonic()
        if now - self._polled_at < SUSPECT_POLL:
            return
        self._polled_at = now
        conn = self.conn
        try:
            readable = conn is None or conn.closed or bool(self._poll(conn.fileno()))
        except (OSError, ValueError):  # closed by the other thread meanwhile
            readable = True
        if readable:
            self.run(lambda c, _: c.execute("SELECT 1"))

    def _poll(self, fd: int) -> list[tuple[int, int]]:
        """What the socket ``fd`` has to say now (empty: nothing), without waiting."""
        polled = self._polled
        if polled is None or polled[0] != fd:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            self._polled = polled = (fd, poller)
        return polled[1].poll(0)

    def dead_for(self) -> float:
        """Seconds since the last call that went through was sent (no later than the
        server last heard from this session): how long the connection may have been
        dead. The heartbeat sends a call at least every third of the dead-connection
        timeout, so a live session stays well under it; over it, a call is out and
        unanswered (or retrying on new connections), or the whole process was frozen
        (a paused VM). Lock-free, for the lifeline."""
        return time.monotonic() - self.answered_sent

    def _reconnect(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.connect()
        assert self.conn is not None
        held = self.in_flight.held()
        found = leases.relock(self.conn, held, lock_base=self.lock_base) if held else leases.Relocked(set(), set())
        self.in_flight.relocked(found.lost, found.taken_back)
        for job_id in found.taken_back:
            self.on_lost(job_id, "a reconnect found its lease changed")
        orphans = leases.release_orphans(self.conn, self.worker_id, [claim.job_id for claim in held])
        log.info(
            "worker.reconnected worker=%s relocked=%s lost=%s taken_back=%s orphans_released=%s",
            self.worker_id,
            len(held) - len(found.lost),
            _ids(found.lost - found.taken_back),
            _ids(found.taken_back),
            _ids(orphans),
        )

    def give_back(self, jobs: list[Claim]) -> None:
        """Return jobs given back (no longer in flight: :class:`InFlight` let them go) to
        pending, no attempt counted, and release their locks (a job cancelled meanwhile
        stays cancelled: its lease changed)."""
        if not jobs:
            return
        def release(conn: psycopg.Connection, _: bool) -> None:
            slotted = limited.slotted(jobs)
            if not slotted:
                leases.release(conn, jobs, lock_base=self.lock_base).result()
                return
            with conn.pipeline():  # one transaction: the jobs and their slots (jobq.limits.claims)
                limited.release_slots(conn, slotted)
                answer = leases.release(conn, jobs, lock_base=self.lock_base)
            answer.result()

        self.run(release)
        log.info("worker.released worker=%s jobs=%s", self.worker_id, ",".join(str(c.job_id) for c in jobs))

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
