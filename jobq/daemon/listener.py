"""An idle worker's wait: LISTEN on a dedicated autocommit connection, a wake-up
pipe, and a timeout that is the polling fallback. The maintenance process listens the
same way on the control channel (:meth:`Listener.payloads`).

NOTIFY is best-effort (a notification sent while the connection is down is lost),
so the caller always bounds the wait by the poll interval; after a reconnect the
wait returns at once, because what was missed meanwhile is unknown.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Callable, Sequence

import psycopg
from psycopg import sql

from jobq import db
from jobq.daemon import idle
from jobq.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

CHANNEL = "jobq"  # wake-ups: '<queue> <jobs>'
CONTROL_CHANNEL = "jobq_control"  # operators' actions: 'cancel <id>', 'pause <queue>', 'resume <queue>'


class Listener:
    """Waits for a wake-up of some queues, or hands over what a channel said. Not
    thread-safe: one thread owns it."""

    def __init__(
        self, url: str, queues: Sequence[str] = (), *, application_name: str, channel: str = CHANNEL
    ) -> None:
        self.url = url
        self.queues = frozenset(queues)
        self.application_name = application_name
        self.channel = channel
        self.conn: psycopg.Connection | None = None
        self._next_attempt = 0.0
        self._backoff = db.ReconnectDelay()

    def connect(self) -> bool:
        """Open the connection and LISTEN; False (and logged) if the database is not there."""
        try:
            self.conn = db.connect(self.url, application_name=self.application_name)
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except (DatabaseUnavailable, psycopg.OperationalError) as exc:
            self._drop(exc)
            return False
        self._backoff.reset()
        return True

    def wait(self, timeout: float, wake_fds: Sequence[int] = (), wakes: Callable[[int], bool] = lambda jobs: True) -> None:
        """Block until a notification for our queues that ``wakes(jobs)`` accepts, a byte
        on a wake-up fd, or the timeout. Returns at once after a reconnect (what was
        missed meanwhile is unknown: the caller looks)."""
        deadline = time.monotonic() + timeout
        if self.conn is None:
            if time.monotonic() >= self._next_attempt and self.connect():
                log.info("listener.reconnected channel=%s", self.channel)
                return
            self._sleep(deadline, wake_fds)
            return
        while True:
            try:
                # Notifications that arrived during our last query are already buffered.
                if self._ours(wakes):
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                ready, _, _ = select.select([self.conn.fileno(), *wake_fds], [], [], remaining)
            except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
                self._drop(exc)
                self._sleep(deadline, wake_fds)
                return
            if any(fd in ready for fd in wake_fds):
                return

    def payloads(self) -> list[str]:
        """The notifications received so far, without waiting; reconnects when it is
        time (what was sent while disconnected is lost: NOTIFY is best-effort)."""
        if self.conn is None:
            if time.monotonic() >= self._next_attempt and self.connect():
                log.info("listener.reconnected channel=%s", self.channel)
            return []
        try:
            return [note.payload for note in self.conn.notifies(timeout=0)]
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
            self._drop(exc)
            return []

    def fileno(self) -> int | None:
        """The connection's socket, to select on; None while disconnected."""
        return self.conn.fileno() if self.conn is not None else None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    @property
    def listening(self) -> bool:
        return self.conn is not None

    def _ours(self, wakes: Callable[[int], bool]) -> bool:
        assert self.conn is not None
        for note in self.conn.notifies(timeout=0):
            queue, jobs = idle.parse(note.payload)
            if queue in self.queues and wakes(jobs):
                return True
        return False

    def _sleep(self, deadline: float, wake_fds: Sequence[int]) -> None:
        select.select(list(wake_fds), [], [], max(0.0, deadline - time.monotonic()))

    def _drop(self, exc: BaseException) -> None:
        if self.conn is not None:
            log.warning("listener.disconnected error=%s", db.first_line(exc))
            self.conn.close()
        self.conn = None
        self._next_attempt = time.monotonic() + self._backoff.next()
