"""The connection pool of one web process (a :class:`jobq.store.connections.ProcessPool`, opened on
first use, after Gunicorn's fork).

Connections are in autocommit mode: every library call the routes make is a single
statement, or statements that need not share a transaction (an admission check and
its insert, an insert and the read of an idempotency key's job, a page and its total),
so each request costs its statements' round trips and no BEGIN or COMMIT.

Each connection is checked when it is handed out (:func:`check_if_disturbed`), so
that connections broken by a database restart are replaced, not used: a server that
ends a session says so on its socket (PostgreSQL sends an error before it closes; a
crashed server's kernel closes the socket), and an idle connection's socket has
nothing to read otherwise. Only a connection whose socket is readable costs a round
trip to check, not every request. A server that vanished without a word (a lost
host, a cut network path) sends nothing: the connection's keepalives end it within
``JOBQ_DEAD_CONNECTION_TIMEOUT`` (:func:`jobq.store.keepalive.dead_connection_parameters`), and
its socket then reads as disturbed too.

Every session runs its statements under a statement timeout
(``JOBQ_API_STATEMENT_TIMEOUT``, 5 s by default): a statement that waits on a lock
or a stuck server is cancelled by the server and the request answers 503, instead
of holding its thread (and, through :mod:`jobq.jobs.group_commit`, every request waiting on it).
"""

from __future__ import annotations

import select

from psycopg_pool import ConnectionPool

from jobq.store.connections import Connection, ProcessPool
from jobq.settings import DEFAULT_API_STATEMENT_TIMEOUT

POOL_MAX_SIZE = 8  # Gunicorn's threads per worker (deploy/gunicorn.conf.py): one each at most
POOL_TIMEOUT = 3.0  # seconds a request waits for a connection before it answers 503


def web_pool(
    url: str, *, timeout: float = POOL_TIMEOUT, statement_timeout: float = DEFAULT_API_STATEMENT_TIMEOUT
) -> ProcessPool:
    """The pool a web process's routes take their connections from: a request waits up
    to ``timeout`` seconds for a connection, and each statement runs at most
    ``statement_timeout`` seconds (0: the server's own ``statement_timeout``); either
    raises DatabaseUnavailable."""
    return ProcessPool(
        url,
        name="jobq-web",
        application_name="jobq-web",
        autocommit=True,
        check=check_if_disturbed,
        timeout=timeout,
        max_size=POOL_MAX_SIZE,
        statement_timeout=statement_timeout or None,
    )


def check_if_disturbed(conn: Connection) -> None:
    """The pool's check: a round trip (``ConnectionPool.check_connection``, raising if
    the connection is dead) only for a connection that received something while idle."""
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)
