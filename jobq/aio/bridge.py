"""The sync library on an async connection: one implementation of every call.

Each coroutine of :mod:`jobq.aio` runs the same function as the sync API (its
validation, its SQL, its errors, its rows) in a thread of the event loop's default
executor, on a psycopg ``Connection`` that *borrows* the libpq connection of the
caller's ``AsyncConnection`` (:class:`jobq.store.foreign.Borrowed`): the same session,
so the same transaction. Meanwhile the
calling task awaits and the event loop goes on serving others; the async connection's
lock is held until the thread is done, so that nothing else uses the connection in
between (a task cancelled while the thread runs is cancelled once it is done: a
statement is never left half-read on the connection).

Without ``conn``, a connection of jobq's own async pool (:mod:`jobq.aio.pool`) is used
and committed when the call returns, as the sync API does with its default pool.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from jobq.errors import InvalidArgument
from jobq.store.foreign import Borrowed

T = TypeVar("T")


async def call(func: Callable[..., T], /, *args: Any, conn: Any = None, **kwargs: Any) -> T:
    """``func(*args, conn=..., **kwargs)`` (a function of the sync API) run on ``conn``
    (a psycopg ``AsyncConnection``, or a SQLAlchemy ``AsyncConnection``/``AsyncSession``
    of the psycopg driver; the caller commits) or, None, on a connection of jobq's async
    pool, committed before this returns. Raises what ``func`` raises."""
    if conn is None:
        from jobq.aio import pool

        async with pool.connection() as pooled:
            return await call(func, *args, conn=pooled, **kwargs)
    owner = await _async_psycopg(conn)
    async with owner.lock:
        borrowed = Borrowed(owner)
        run = functools.partial(contextvars.copy_context().run, func, *args, conn=borrowed, **kwargs)
        future = asyncio.get_running_loop().run_in_executor(None, run)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await asyncio.wait([future])  # the session is ours until the thread is done with it
            raise


async def _async_psycopg(conn: Any) -> psycopg.AsyncConnection[Any]:
    """The psycopg AsyncConnection ``conn`` is or holds (SQLAlchemy's asyncio
    ``AsyncConnection`` or ``AsyncSession`` on ``postgresql+psycopg``). Raises
    InvalidArgument (field ``conn``) for anything else."""
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    if type(conn).__module__.startswith("sqlalchemy."):
        if hasattr(conn, "get_bind"):  # an AsyncSession: its connection, in its transaction
            conn = await conn.connection()
        raw = await conn.get_raw_connection()
        if isinstance(raw.driver_connection, psycopg.AsyncConnection):
            return raw.driver_connection
    if isinstance(conn, psycopg.Connection):
        raise InvalidArgument("conn", "a sync Connection goes to jobq's sync functions; jobq.aio takes an AsyncConnection")
    raise InvalidArgument("conn", f"a psycopg AsyncConnection (or a SQLAlchemy async one of psycopg), not {type(conn).__name__}")
