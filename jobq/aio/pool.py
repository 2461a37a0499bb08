"""jobq's own async pool: what :mod:`jobq.aio` uses without ``conn``.

One ``psycopg_pool.AsyncConnectionPool`` for ``DATABASE_URL`` per event loop (a pool's
tasks belong to the loop that opened it), opened on first use in the background, with
the session parameters of every connection jobq opens (keepalives, ``JOBQ_SCHEMA``'s
search_path: :mod:`jobq.store.connections`). :func:`close` closes the running loop's
(an application calls it at shutdown, e.g. in FastAPI's lifespan).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from jobq import settings
from jobq.store.connections import CONNECT_TIMEOUT, database_errors, session_parameters

MAX_SIZE = 8

_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def connection() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of the running loop's pool, committed when the block ends without an
    error (rolled back otherwise). Raises DatabaseUnavailable when none can be had
    within the pool's timeout, or the database drops it; ConfigError without
    ``DATABASE_URL``."""
    pool = await _current()
    with database_errors():
        async with pool.connection() as conn:
            yield conn


async def close() -> None:
    """Close the running loop's pool, if it opened one (the next call opens another)."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.close()


async def _current() -> AsyncConnectionPool:
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        current = settings.current()
        url = current.require_database_url()
        kwargs = {"connect_timeout": CONNECT_TIMEOUT, "application_name": "jobq", **session_parameters(url, None)}
        pool = AsyncConnectionPool(
            url, open=False, kwargs=kwargs, min_size=1, max_size=MAX_SIZE, timeout=CONNECT_TIMEOUT * 2, name="jobq-aio"
        )
        _pools[loop] = pool
        await pool.open(wait=False)
    return pool
