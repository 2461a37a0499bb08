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
from collections.abc import Sequence
from typing import Protocol

import psycopg
from psycopg import sql

from jobq.store import connections
from jobq.daemon.boards import idle
from jobq.errors import DatabaseUnavailable
from jobq.store.sql.database import HAND_CHANNEL_GET, WAKE_CHANNEL_GET

log = logging.getLogger(__name__)


class Waking(Protocol):
    """Who takes a notification (:class:`jobq.daemon.boards.idle.Seat` for a supervisor's workers)."""

    def reading(self) -> None:
        """The connection is read now."""

    def wakes(self, jobs: int) -> bool:
        """Whether to take a notification for ``jobs`` jobs of our queues."""

    def next_look(self) -> float | None:
        """When (monotonic) to call take_over, if a notification was left to others."""

    def take_over(self, now: float) -> bool:
        """Whether to take, after all, a notification left to others."""

    def deaf(self) -> None:
        """The connection broke: notifications no longer reach us."""


class Everyone:
    """Every notification of our queues wakes us."""

    def reading(self) -> None:
        pass

    def wakes(self, jobs: int) -> bool:
        return True

    def next_look(self) -> float | None:
        return None

    def take_over(self, now: float) -> bool:
        return False

    def deaf(self) -> None:
        pass


EVERYONE = Everyone()


class Listener:
    """Waits for a wake-up of some queues, or hands over what a channel said. Not
    thread-safe: one thread owns it."""

    def __init__(
        self, url: str, queues: Sequence[str] | None = (), *, application_name: str, channel: str = WAKE_CHANNEL_GET,
        hand_to: str | None = None,
    ) -> None:
        """``queues``: whose wake-ups to take (None: every queue's). ``channel``: the
        statement that names what to LISTEN on, asked at each connect; by default the
        wake-up channel, as the schema names it (jobq_wake_channel()); the operators'
        actions' is CONTROL_CHANNEL_GET (jobq_control_channel()). ``hand_to``: a worker's
        id, to LISTEN also on the hand-off channel (jobq_hand_channel()) and take the
        jobs handed to it (:meth:`take_handed`)."""
        self.url = url
        self.queues = None if queues is None else frozenset(queues)
        self.application_name = application_name
        self.channel_get = channel
        self.channel: str | None = None
        self.hand_to = hand_to
        self._hand_channel = b""  # jobq_hand_channel() as notifications name it
        self._handed: list[tuple[int, int]] = []  # (job id, lease) handed to hand_to, not taken yet
        self.conn: psycopg.Connection | None = None
        self._next_attempt = 0.0
        self._encoding = "utf-8"
        self._backoff = connections.ReconnectDelay()
        self.connects = 0  # successful connects so far: a caller sees a reconnect by it
        self.woken_by: str | None = None  # the queue of the notification that ended the last wait

    def connect(self) -> bool:
        """Open the connection and LISTEN; False (and logged) if the database is not there."""
        try:
            self.conn = connections.connect(self.url, application_name=self.application_name)
            (self.channel,) = self.conn.execute(self.channel_get).fetchone()  # type: ignore[misc]
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            self._encoding = self.conn.info.encoding
            if self.hand_to is not None:
                (hand_channel,) = self.conn.execute(HAND_CHANNEL_GET).fetchone()  # type: ignore[misc]
                self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(hand_channel)))
                self._hand_channel = hand_channel.encode(self._encoding)
            # Anything psycopg kept aside while LISTEN ran (wait() reads libpq directly):
            # the caller looks after a connect anyway.
            for _ in self.conn.notifies(timeout=0):
                pass
        except (DatabaseUnavailable, psycopg.OperationalError) as exc:
            self._drop(exc)
            return False
        self._backoff.reset()
        self.connects += 1
        return True

    def wait(self, timeout: float, wake_fds: Sequence[int] = (), waking: Waking = EVERYONE) -> None:
        """Block until a notification for our queues that ``waking`` takes (at once, or
        after leaving it to others for a moment), a byte on a wake-up fd, or the timeout.
        When the connection breaks, ``waking.deaf()`` is told at once (NOTIFY no longer
        reaches us: not to be counted as a listening idle worker) and the wait goes on
        without notifications; a wait without a connection reconnects as soon as the
        backoff allows, and then returns (what was missed meanwhile is unknown: the
        caller looks)."""
        deadline = time.monotonic() + timeout
        self.woken_by = None
        if self.conn is not None:
            try:
                self._listen(deadline, wake_fds, waking)
                return
            except (psycopg.OperationalError, psycopg.InterfaceError, OSError) as exc:
                self._drop(exc)
                waking.deaf()
        while True:  # without a connection: try again as soon as the backoff allows
            if time.monotonic() >= self._next_attempt and self.connect():
                if self.connects > 1:
                    log.info("listener.reconnected channel=%s", self.channel)
                return
            if self._sleep(min(deadline, self._next_attempt), wake_fds) or time.monotonic() >= deadline:
                return

    def _listen(self, deadline: float, wake_fds: Sequence[int], waking: Waking) -> None:
        assert self.conn is not None
        sock = self.conn.fileno()
        fds = [sock, *wake_fds]
        while True:
            # Notifications that arrived meanwhile are waiting in the socket or libpq.
            waking.reading()
            if self._ours(waking):
                return
            now = time.monotonic()
            if now >= deadline or waking.take_over(now):
                return
            look = waking.next_look()
            until = deadline if look is None else min(deadline, look)
            ready, _, _ = select.select(fds, [], [], max(0.0, until - now))
            if any(fd != sock for fd in ready):
                return  # a wake-up fd

    @property
    def heard(self) -> bool:
        """Whether a notification of ours ended the last wait: a hand-off not taken yet, or
        a wake-up."""
        return self.handed or self.woken_by is not None

    @property
    def handed(self) -> bool:
        """Whether a job was handed to this worker and not taken yet."""
        return bool(self._handed)

    def take_handed(self) -> list[tuple[int, int]]:
        """The jobs handed to this worker that the notifications named so far, as (job id,
        lease), forgotten here once taken."""
        handed, self._handed = self._handed, []
        return handed

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

    def _ours(self, waking: Waking) -> bool:
        """Read what the socket holds and whether one of the notifications is ours to
        take: a job handed to us, or a wake-up. Straight from libpq (what
        ``Connection.notifies()`` does, without its generator, lock and timeout
        machinery: a third of the time from a notification's arrival to the claim's
        send). The wake-ups after the one taken are read and dropped: their jobs are
        committed, so the claim that follows sees them; every hand-off is kept."""
        assert self.conn is not None
        pgconn = self.conn.pgconn
        pgconn.consume_input()
        handed = woken = False
        while (note := pgconn.notifies()) is not None:
            if note.relname == self._hand_channel:
                handed = self._handed_to_us(note.extra.decode(self._encoding)) or handed
            elif not woken:  # a wake-up is weighed on the board even beside a hand-off
                queue, jobs = idle.parse(note.extra.decode(self._encoding))
                woken = (self.queues is None or queue in self.queues) and waking.wakes(jobs)
                if woken:
                    self.woken_by = queue
        return handed or woken

    def _handed_to_us(self, payload: str) -> bool:
        """A hand-off, ``'<job id> <lease> <worker id>'``: kept if the worker is us."""
        job_id, _, rest = payload.partition(" ")
        lease, _, worker = rest.partition(" ")
        if worker != self.hand_to:
            return False
        self._handed.append((int(job_id), int(lease)))
        return True

    def _sleep(self, until: float, wake_fds: Sequence[int]) -> bool:
        """Sleep until ``until`` (monotonic); True if a wake-up fd ended it."""
        ready, _, _ = select.select(list(wake_fds), [], [], max(0.0, until - time.monotonic()))
        return bool(ready)

    def _drop(self, exc: BaseException) -> None:
        if self.conn is not None:
            log.warning("listener.disconnected error=%s", connections.first_line(exc))
            self.conn.close()
        self.conn = None
        self._next_attempt = time.monotonic() + self._backoff.next()
