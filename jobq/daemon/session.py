"""A worker's claim session: the one dedicated connection that claims jobs, writes
their outcomes and heartbeats, and holds their advisory locks.

The worker's main thread and its heartbeat thread share it through :meth:`run`,
which serialises them. When the connection breaks (a database restart, a
terminated backend) the locks are gone with it: :meth:`run` reconnects with
backoff, takes again the lock of every job still held and checks its lease, then
retries the call once, telling it that it is a retry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

import psycopg

from jobq import claims, db
from jobq.claims import Held
from jobq.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


class ClaimSession:
    def __init__(self, url: str, *, worker_id: str, lock_base: int, stopping: threading.Event) -> None:
        self.url = url
        self.worker_id = worker_id
        self.lock_base = lock_base
        self.stopping = stopping
        self.conn: psycopg.Connection | None = None
        self.lock = threading.RLock()
        # Jobs claimed and not yet recorded, with whether this session holds their lock.
        self.held: dict[int, Held] = {}

    def connect(self) -> None:
        """Open the connection, waiting with backoff while the database is down.

        Raises DatabaseUnavailable only when the worker is asked to stop meanwhile.
        """
        backoff = db.ReconnectDelay()
        while True:
            try:
                self.conn = db.connect(self.url, application_name=f"jobq worker {self.worker_id}")
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
            while True:
                if self.conn is None or self.conn.closed:
                    self._reconnect()
                try:
                    return call(self.conn, retried)  # type: ignore[arg-type]
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    if self.conn is not None and not self.conn.broken and not self.conn.closed:
                        raise  # an error of the statement itself, not of the connection
                    log.warning("worker.connection_lost worker=%s error=%s", self.worker_id, db.first_line(exc))
                    self.conn.close()
                    retried = True

    def _reconnect(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.connect()
        assert self.conn is not None
        lost: set[int] = set()
        if self.held:
            lost = claims.relock(self.conn, list(self.held.values()), lock_base=self.lock_base)
            for job_id, entry in self.held.items():
                self.held[job_id] = Held(entry.job_id, entry.lease, job_id not in lost)
        orphans = claims.release_orphans(self.conn, self.worker_id, list(self.held))
        log.info(
            "worker.reconnected worker=%s relocked=%s lost=%s orphans_released=%s",
            self.worker_id,
            len(self.held) - len(lost),
            ",".join(map(str, sorted(lost))) or "-",
            ",".join(map(str, orphans)) or "-",
        )

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
