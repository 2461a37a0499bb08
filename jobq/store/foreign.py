"""Connections that are not psycopg's own but hold one: what ``conn=`` also accepts.

jobq works on such a connection through a :class:`Borrowed` view of its libpq session:
the same session and transaction, with psycopg's default adapters (jobq's statements
read ``jsonb`` as Python objects; Django, for one, has its connections load it as
text).

A SQLAlchemy ``Connection`` or ``Session`` bound to a psycopg 3 engine
(``postgresql+psycopg://``) is unwrapped to the psycopg connection under it, inside the
transaction SQLAlchemy has begun (the session's ``connection()`` begins it if need be):
the job is written in that transaction and commits or rolls back with it. Recognised by
the class's module, so that jobq never imports SQLAlchemy.
"""

from __future__ import annotations

from typing import Any

import psycopg

from jobq.errors import InvalidArgument


class Borrowed(psycopg.Connection[Any]):
    """A sync view of another connection's libpq session (a psycopg ``Connection`` or
    ``AsyncConnection`` that someone else owns), for the length of one call.

    It shares the session's transaction and autocommit mode (a statement on it inside
    the owner's transaction is in that transaction; outside one, it begins one just as
    the owner would, which the owner's commit ends). Its adapters are psycopg's
    defaults, not the owner's. It never prepares statements (the owner's names for its
    prepared statements are its own) and never closes the session. Use it from one
    thread at a time, while the owner is not used."""

    def __init__(self, owner: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        super().__init__(owner.pgconn)
        self._autocommit = owner.autocommit  # the owner's mode, as it is (no round trip)
        self.prepare_threshold = None

    def __del__(self, *args: Any) -> None:
        pass  # not ours to close, nor to warn about: the owner closes the session


def psycopg_connection(conn: Any) -> psycopg.Connection[Any]:
    """The psycopg connection ``conn`` is or holds. Raises :class:`InvalidArgument`
    (field ``conn``) for anything else, e.g. a SQLAlchemy connection of another driver
    or an async connection passed to the sync API."""
    if isinstance(conn, psycopg.Connection):
        return conn
    if type(conn).__module__.startswith("sqlalchemy."):
        if hasattr(conn, "get_bind") and callable(getattr(conn, "connection", None)):  # a Session
            conn = conn.connection()
        driver = conn.connection.driver_connection  # Connection -> pool's proxy -> the DBAPI's own
        if isinstance(driver, psycopg.Connection):
            return Borrowed(driver)
        raise InvalidArgument("conn", f"a SQLAlchemy connection of the psycopg 3 driver, not {type(driver).__name__}")
    if isinstance(conn, psycopg.AsyncConnection):
        raise InvalidArgument("conn", "an AsyncConnection goes to jobq.aio's functions, not to the sync ones")
    raise InvalidArgument(
        "conn", f"a psycopg Connection, or a SQLAlchemy Connection or Session, not {type(conn).__name__}"
    )
