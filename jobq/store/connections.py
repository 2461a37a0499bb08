"""Connections: opening them, pools private to a process, and error translation.

This is the one boundary where psycopg's connection failures become
:class:`jobq.errors.DatabaseUnavailable`. Connections are always opened in the
process that uses them (after any fork): a :class:`ProcessPool` remembers the pid
that opened it and opens another in a child. The library's default pool (for
``DATABASE_URL``) and each web process's pool are ProcessPools.

Every connection jobq opens (:func:`connect`, :class:`ProcessPool`) is ended on both
sides when its other end vanishes without a word (a host lost, a network path cut):
see :mod:`jobq.store.keepalive`. Without that, the server keeps a vanished
worker's session, and with it the advisory locks that keep its jobs from the stale
reaper, for about two hours (the kernel's keepalive defaults). The server waits longer
than the client (:func:`~jobq.store.keepalive.server_dead_connection_timeout`): a worker cut off stops its
handlers first, so that its jobs' locks are freed only once nothing of theirs runs.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from jobq.store.keepalive import CHECK_INTERVAL, dead_connection_parameters, server_dead_connection_timeout
from jobq.store.sql.counters import COUNTER_SLOT_TAKE
from jobq.store.sql.database import DATABASE_PING
from jobq.store.options import with_search_path, with_statement_timeout
from jobq.store import foreign, jsonb, session_settings, utc
from jobq.errors import DatabaseUnavailable
from jobq import settings

log = logging.getLogger(__name__)

Connection = psycopg.Connection[Any]
T = TypeVar("T")

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


def connect(
    url: str,
    *,
    autocommit: bool = True,
    application_name: str = "jobq",
    dead_connection_timeout: float | None = None,
) -> Connection:
    """A new dedicated connection, ended on both sides within about
    ``dead_connection_timeout`` seconds if its other end vanishes (None: this process's
    ``JOBQ_DEAD_CONNECTION_TIMEOUT``, :func:`jobq.settings.current`).

    Raises DatabaseUnavailable if it cannot be opened.
    """
    parameters = session_parameters(url, dead_connection_timeout)
    with database_errors():
        return _Connection.connect(
            url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT, application_name=application_name, **parameters
        )


def connect_counting(url: str, *, application_name: str, lock_base: int) -> Connection:
    """A dedicated connection of jobq's own (a worker's claim session, maintenance) that
    counts the jobs it moves in a counter slot of its own
    (``jobq.store.sql.counters.COUNTER_SLOT_TAKE``): it never waits on the counter rows
    an application's open transaction holds.

    Raises DatabaseUnavailable if it cannot be opened. On a schema older than the slots
    (migration 4) it counts by backend pid, as before; the caller's schema check refuses
    such a database anyway.
    """
    conn = connect(url, application_name=application_name)
    try:
        with database_errors():
            conn.execute(COUNTER_SLOT_TAKE, {"lock_base": lock_base})
    except psycopg.errors.UndefinedFunction:
        pass
    except BaseException:
        conn.close()
        raise
    return conn


def session_parameters(
    url: str, dead_connection_timeout: float | None, statement_timeout: float | None = None
) -> dict[str, int | str]:
    """The libpq parameters of every session jobq opens: the keepalives of
    ``dead_connection_timeout`` (None: JOBQ_DEAD_CONNECTION_TIMEOUT), a statement timeout
    if given, and JOBQ_SCHEMA's search_path."""
    timeout = settings.current().dead_connection_timeout if dead_connection_timeout is None else dead_connection_timeout
    parameters = dead_connection_parameters(url, timeout, server_dead_connection_timeout(timeout))
    if statement_timeout is not None:
        parameters = with_statement_timeout(url, parameters, statement_timeout)
    return with_search_path(url, parameters, settings.current().db_schema)


# Connection strings whose server refused client_connection_check_interval.
_refuses_check_interval: set[str] = set()


class _Connection(psycopg.Connection[Any]):
    """A psycopg connection that connects without ``client_connection_check_interval``
    where the server refuses it (PostgreSQL 13 and older, a server platform that
    cannot report a closed socket), saying so once per connection string; the
    keepalives still apply there. It reads json and jsonb with :mod:`jobq.store.jsonb`."""

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> _Connection:  # type: ignore[override]
        if conninfo in _refuses_check_interval:
            kwargs["options"] = _without_check_interval(kwargs.get("options", ""))
        try:
            conn = super().connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            if CHECK_INTERVAL not in str(exc) or CHECK_INTERVAL not in kwargs.get("options", ""):
                raise
            _refuses_check_interval.add(conninfo)
            log.warning("db.check_interval_refused setting=%s error=%s", CHECK_INTERVAL, first_line(exc))
            kwargs["options"] = _without_check_interval(kwargs["options"])
            conn = super().connect(conninfo, **kwargs)
        jsonb.use_for(conn)
        utc.use_for(conn)
        return conn


def _without_check_interval(options: str) -> str:
    """``options`` without its ``-c client_connection_check_interval=...``."""
    words = options.split(" ")
    kept: list[str] = []
    for word in words:
        if word.startswith(CHECK_INTERVAL + "=") and kept and kept[-1] == "-c":
            kept.pop()
        else:
            kept.append(word)
    return " ".join(kept)


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
    Each is ended within about ``dead_connection_timeout`` seconds if its other end
    vanishes (:func:`dead_connection_parameters`; None: this process's setting, read
    when the pool opens). With a ``statement_timeout`` (seconds), each session's
    statements are cancelled by the server past it
    (:func:`jobq.store.options.with_statement_timeout`), and
    a cancelled statement raises DatabaseUnavailable like a lost connection: nothing of
    it was committed.
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
        dead_connection_timeout: float | None = None,
        statement_timeout: float | None = None,
    ) -> None:
        self.url = url
        self.dead_connection_timeout = dead_connection_timeout
        self.statement_timeout = statement_timeout
        self._connect_kwargs = {"autocommit": autocommit, "connect_timeout": CONNECT_TIMEOUT, "application_name": application_name}
        self._options = {
            "min_size": 1,
            "max_size": max_size,
            "connection_class": _Connection,
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

        Raises DatabaseUnavailable when none can be had within the pool's timeout, the
        database drops it, or (with a statement timeout) a statement is cancelled.
        """
        try:
            with database_errors(), self._current().connection() as conn:
                yield conn
        except psycopg.errors.QueryCanceled as exc:
            if self.statement_timeout is None:
                raise
            raise DatabaseUnavailable(f"database unavailable: {first_line(exc)}") from exc

    def close(self) -> None:
        """Close this process's pool, if it opened one."""
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None

    def _current(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                parameters = session_parameters(self.url, self.dead_connection_timeout, self.statement_timeout)
                kwargs = {**self._connect_kwargs, **parameters}
                self._pool = ConnectionPool(self.url, open=False, kwargs=kwargs, **self._options)  # type: ignore[arg-type]
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
            current = settings.current()
            _default = ProcessPool(
                current.require_database_url(),
                name="jobq-default",
                application_name="jobq",
                dead_connection_timeout=current.dead_connection_timeout,
            )
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
    """The caller's connection as is (its transaction, its commit; a SQLAlchemy
    Connection or Session: the psycopg connection under it, :mod:`jobq.store.foreign`), or one from the
    default pool whose work is committed when the block ends without an error. With
    ``JOBQ_SCHEMA``, the caller's connection has jobq's ``search_path`` for the block
    (:mod:`jobq.store.session_settings`); the pool's have it from the start."""
    if conn is not None:
        conn = foreign.psycopg_connection(conn)  # a SQLAlchemy Connection or Session: the psycopg one under it
        theirs = not isinstance(conn, _Connection)  # jobq's own sessions have its search_path already
        schema = settings.current().db_schema if theirs else None
        with database_errors(), session_settings.setting(conn, session_settings.SEARCH_PATH, schema):
            yield conn
        return
    with default_pool().connection() as pooled:
        yield pooled


MOVED_RETRIES = 3  # a statement that met a row moved meanwhile is sent again this often
FINISHED_DEFAULT = "jobs_finished_default"


def own_transaction(conn: Connection) -> bool:
    """Whether a statement sent now on ``conn`` is a transaction of its own (autocommit,
    no transaction open): the caller holds none of its locks past it."""
    return conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def moved_meanwhile(exc: BaseException) -> bool:
    """Whether a statement failed because the partitions of jobs changed under it
    (schema 13), so that the same statement sent again goes through:

    * SQLSTATE 40001: it updated or locked a job that a transaction committed after its
      snapshot had moved to another partition (finished, cancelled or deleted);
    * SQLSTATE 23514 on jobs_finished_default: it routed a finishing job to the
      default partition while the maintenance leader attached a partition covering
      its completion time (routing works from the partitions as they were when the
      statement started; the default partition's new bounds refuse the row)."""
    if isinstance(exc, psycopg.errors.SerializationFailure):
        return True
    return isinstance(exc, psycopg.errors.CheckViolation) and exc.diag.table_name == FINISHED_DEFAULT


def sent_again_if_moved(conn: Connection, send: Callable[[], T], *, retries: int = MOVED_RETRIES) -> T:
    """``send()`` in a savepoint (a transaction of its own in autocommit mode), sent
    again up to ``retries`` times while it fails because the partitions moved under it
    (:func:`moved_meanwhile`: a job that finished, was cancelled or deleted meanwhile
    left jobs_live; a partition attached meanwhile). Sent again, its new snapshot sees
    the row where it is now, and the statement's status guard decides."""
    for attempt in range(retries + 1):
        try:
            with conn.transaction():
                return send()
        except (psycopg.errors.SerializationFailure, psycopg.errors.CheckViolation) as exc:
            if attempt == retries or not moved_meanwhile(exc):
                raise
            log.info("db.row_moved_meanwhile: sent again")
    raise AssertionError("unreachable")


def again_if_moved(
    conn: Connection, statement: Any, params: Any = None, *, cursor: psycopg.Cursor[Any] | None = None
) -> psycopg.Cursor[Any]:
    """Execute one statement that updates, deletes or locks jobs by id, as
    :func:`sent_again_if_moved` sends it. Returns the cursor (``cursor``, or a new one
    of ``conn``), its rows not read yet."""
    return sent_again_if_moved(conn, lambda: (cursor or conn.cursor()).execute(statement, params))


def ping(conn: Connection | None = None) -> None:
    """Return if the database answers a trivial query; raise DatabaseUnavailable if not."""
    with connection(conn) as c:
        c.execute(DATABASE_PING)
