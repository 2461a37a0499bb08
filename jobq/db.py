"""Connections: opening them, the per-process default pool, and error translation.

This is the one boundary where psycopg's connection failures become
:class:`jobq.errors.DatabaseUnavailable`. Connections are always opened in the
process that uses them (after any fork); the default pool remembers the pid that
created it and is rebuilt in a child.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from jobq import queries
from jobq.errors import DatabaseUnavailable
from jobq.settings import Settings

Connection = psycopg.Connection[Any]

CONNECT_TIMEOUT = 5  # seconds: a database that does not answer is reported, not waited on forever


class Backoff:
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


_pool: ConnectionPool | None = None
_pool_pid: int | None = None
_pool_lock = threading.Lock()


def default_pool() -> ConnectionPool:
    """This process's pool for ``DATABASE_URL``, opened on first use (and again after a fork)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            url = Settings.from_env().require_database_url()
            _pool = ConnectionPool(
                url,
                min_size=1,
                max_size=8,
                kwargs={"connect_timeout": CONNECT_TIMEOUT, "application_name": "jobq"},
                check=ConnectionPool.check_connection,
                timeout=CONNECT_TIMEOUT * 2,
                open=True,
                name="jobq-default",
            )
            _pool_pid = os.getpid()
        return _pool


def close_default_pool() -> None:
    """Close this process's default pool, if it opened one."""
    global _pool
    with _pool_lock:
        if _pool is not None and _pool_pid == os.getpid():
            _pool.close()
        _pool = None


atexit.register(close_default_pool)


@contextlib.contextmanager
def connection(conn: Connection | None = None) -> Iterator[Connection]:
    """The caller's connection as is (its transaction, its commit), or one from the
    default pool whose work is committed when the block ends without an error."""
    if conn is not None:
        with database_errors():
            yield conn
        return
    with database_errors(), default_pool().connection() as pooled:
        yield pooled


def ping(conn: Connection | None = None) -> None:
    """Return if the database answers a trivial query; raise DatabaseUnavailable if not."""
    with connection(conn) as c:
        c.execute(queries.DATABASE_PING)
