"""Connections that are not psycopg's own but hold one: what ``conn=`` also accepts.

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
            return driver
        raise InvalidArgument("conn", f"a SQLAlchemy connection of the psycopg 3 driver, not {type(driver).__name__}")
    if isinstance(conn, psycopg.AsyncConnection):
        raise InvalidArgument("conn", "an AsyncConnection goes to jobq.aio's functions, not to the sync ones")
    raise InvalidArgument(
        "conn", f"a psycopg Connection, or a SQLAlchemy Connection or Session, not {type(conn).__name__}"
    )
