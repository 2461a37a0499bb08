"""Connections: opening them, pools private to a process, and error translation.

This is the one boundary where psycopg's connection failures become
:class:`jobq.errors.DatabaseUnavailable`. Connections are always opened in the
process that uses them (after any fork): a :class:`ProcessPool` remembers the pid
that opened it and opens another in a child. The library's default pool (for
``DATABASE_URL``) and each web process's pool are ProcessPools.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from jobq import queries
from jobq.errors import DatabaseUnavailable
from jobq import settings

Connection = psycopg.Connection[Any]

CONNECT_TIMEOUT = 5  # seconds: a database that does not answer is reported, not waited on forever


class ReconnectDelay:
    """Seconds between two attempts at a database that is not there: doubling from
    ``first`` up to ``cap``, back to ``first`` after a success."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first, self.cap = first, cap
        self.delay = first

    def next(self) -> float:
        """The delay to wait now; the one after it doubles."""
        delay, self.delay = self.delay, min(self.delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self.delay = self.first


def connect(url: str, *, autocommit: bool = True, application_name: str = "jobq") -> Connection:
    """A new dedicated connection. Raises DatabaseUnavailable if it cannot be opened."""
    with database_errors():
        return psycopg.connect(
            url,
            autocommit=autocommit,
            connect_timeout=CONNECT_TIMEOUT,
            application_name=application_name,
        )


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """Turn psycopg's "the database is not there" errors into DatabaseUnavailable."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
        if isinstance(exc, psycopg.errors.QueryCanceled):
            raise
        raise DatabaseUnavailable(f"database unavailable: {first_line(exc)}") from exc


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, for one-line logs and errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class ProcessPool:
    """A connection pool for one database URL, opened on first use by the process that
    uses it: a forked child opens its own instead of sharing its parent's sockets.

    Connections are made in the background, so a database that is down makes
    :meth:`connection` raise DatabaseUnavailable after ``timeout``, never blocks start-up.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str,
        application_name: str,
        autocommit: bool = False,
        check: Callable[[Connection], None] = ConnectionPool.check_connection,
        timeout: float = CONNECT_TIMEOUT * 2,
        max_size: int = 8,
    ) -> None:
        self.url = url
        self._options = {
            "min_size": 1,
            "max_size": max_size,
            "kwargs": {"autocommit": autocommit, "connect_timeout": CONNECT_TIMEOUT, "application_name": application_name},
            "check": check,
            "timeout": timeout,
            "name": name,
        }
        self._pool: ConnectionPool | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled connection for the block (committed at its end unless autocommit).

        Raises DatabaseUnavailable when none can be had within the pool's timeout or
        the database drops it.
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
                self._pool = ConnectionPool(self.url, open=False, **self._options)  # type: ignore[arg-type]
                self._pool.open(wait=False)
                self._pid = os.getpid()
                atexit.register(self.close)
            return self._pool


_default: ProcessPool | None = None
_default_lock = threading.Lock()


def default_pool() -> ProcessPool:
    """The pool for ``DATABASE_URL`` (as :func:`jobq.settings.current` read it) that
    library calls without a ``conn`` use. Raises ConfigError if it is not set."""
    global _default
    with _default_lock:
        if _default is None:
            url = settings.current().require_database_url()
            _default = ProcessPool(url, name="jobq-default", application_name="jobq")
        return _default


def close_default_pool() -> None:
    """Close the default pool and forget the settings (:func:`jobq.settings.reset`): the
    next call opens one for ``DATABASE_URL`` as it is then."""
    global _default
    with _default_lock:
        if _default is not None:
            _default.close()
        _default = None
        settings.reset()


@contextlib.contextmanager
def connection(conn: Connection | None = None) -> Iterator[Connection]:
    """The caller's connection as is (its transaction, its commit), or one from the
    default pool whose work is committed when the block ends without an error."""
    if conn is not None:
        with database_errors():
            yield conn
        return
    with default_pool().connection() as pooled:
        yield pooled


def ping(conn: Connection | None = None) -> None:
    """Return if the database answers a trivial query; raise DatabaseUnavailable if not."""
    with connection(conn) as c:
        c.execute(queries.DATABASE_PING)
