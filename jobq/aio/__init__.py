"""jobq from ``async def`` code: the library's calls as coroutines.

    async with await psycopg.AsyncConnection.connect(url) as conn:
        async with conn.transaction():
            await conn.execute("INSERT INTO orders ...")
            job = await jobq.aio.enqueue("send_receipt", {"order": 17}, conn=conn)
        print(await jobq.aio.result(job.id, timeout=30))

With ``conn`` (a psycopg ``AsyncConnection``, or SQLAlchemy's async connection or
session on psycopg) the job is written in the caller's transaction; without, on jobq's
own async pool for ``DATABASE_URL`` (:func:`close` at shutdown). Handlers may be
``async def`` too: see :mod:`jobq.handlers.coroutines`.
"""

from jobq.aio.api import (
    cancel,
    enqueue,
    enqueue_many,
    enqueue_workflow,
    get,
    get_workflow,
    list_jobs,
    result,
    wait,
)
from jobq.aio.pool import close

__all__ = [
    "cancel",
    "close",
    "enqueue",
    "enqueue_many",
    "enqueue_workflow",
    "get",
    "get_workflow",
    "list_jobs",
    "result",
    "wait",
]
