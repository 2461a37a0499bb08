"""The connection pool of one web process, opened on first use (after Gunicorn's fork).

Connections are in autocommit mode: every library call the routes make is a single
statement, or statements that need not share a transaction (an admission check and
its insert, an insert and the read of an idempotency key's job, a page and its total),
so each request costs its statements' round trips and no BEGIN or COMMIT.

Each connection is checked when it is handed out (:func:`check_if_disturbed`), so
that connections broken by a database restart are replaced, not used: a server that
ends a session says so on its socket (PostgreSQL sends an error before it closes; a
crashed server's kernel closes the socket), and an idle connection's socket has
nothing to read otherwise. Only a connection whose socket is readable costs a round
trip to check, not every request.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import threading
from collections.abc import Iterator

from psycopg_pool import ConnectionPool

from jobq.db import CONNECT_TIMEOUT, Connection, database_errors

POOL_MIN_SIZE = 1
POOL_MAX_SIZE = 8  # Gunicorn's threads per worker (deploy/gunicorn.conf.py): one each at most
POOL_TIMEOUT = 3.0  # seconds a request waits for a connection before it answers 503


class Database:
    """A lazily opened pool for one database URL, private to the process that opened it."""

    def __init__(self, url: str, *, timeout: float = POOL_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self._pool: ConnectionPool | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled autocommit connection for the block.

        Raises :class:`jobq.errors.DatabaseUnavailable` when none can be had within
        the pool timeout or the database drops it.
        """
        with database_errors(), self._current().connection() as conn:
            yield conn

    def close(self) -> None:
        """Close this process's pool, if it opened one."""
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None

    def _current(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ConnectionPool(
                    self.url,
                    min_size=POOL_MIN_SIZE,
                    max_size=POOL_MAX_SIZE,
                    kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT, "application_name": "jobq-web"},
                    check=check_if_disturbed,
                    timeout=self.timeout,
                    open=False,
                    name="jobq-web",
                )
                # Connections are made in the background: a database that is down makes
                # requests answer 503 after the timeout, never stops the process.
                self._pool.open(wait=False)
                self._pid = os.getpid()
                atexit.register(self.close)
            return self._pool


def check_if_disturbed(conn: Connection) -> None:
    """The pool's check: a round trip (``ConnectionPool.check_connection``, raising if
    the connection is dead) only for a connection that received something while idle."""
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)
