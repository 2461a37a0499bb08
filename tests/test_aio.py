"""jobq.aio: the library's calls as coroutines on a psycopg AsyncConnection (the job
commits with the caller's transaction) or on jobq's own async pool; the same
validation, errors and rows as the sync API."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import jobq
import jobq.aio
from jobq.errors import InvalidArgument, JobNotCancellable, JobNotFound

pytestmark = [pytest.mark.db, pytest.mark.aio]


def run(coro):
    return asyncio.run(coro)


def test_a_job_enqueued_on_an_async_connection_commits_with_its_transaction(conn, database_url):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url) as aconn:
            kept = await jobq.aio.enqueue("email", {"to": "a@example.com"}, priority=8, conn=aconn)
            assert jobq.list_jobs(conn=conn).total == 0  # not committed yet: nobody else sees it
            await aconn.commit()
            dropped = await jobq.aio.enqueue("email", {"to": "b@example.com"}, conn=aconn)
            await aconn.rollback()
            return kept, dropped

    kept, dropped = run(scenario())
    assert jobq.get(kept.id, conn=conn) == kept  # the same row the sync API reads
    assert (kept.priority, kept.payload) == (8, {"to": "a@example.com"})
    with pytest.raises(JobNotFound):
        jobq.get(dropped.id, conn=conn)


def test_on_an_autocommit_async_connection_the_job_is_stored_at_once(conn, database_url):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            job = await jobq.aio.enqueue("email", conn=aconn)
            return job, aconn.info.transaction_status

    job, status = run(scenario())
    assert jobq.get(job.id, conn=conn).status == "pending"
    assert status == psycopg.pq.TransactionStatus.IDLE


def test_the_async_api_refuses_what_the_sync_api_refuses_with_the_same_errors(conn, database_url):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url) as aconn:
            with pytest.raises(InvalidArgument) as bad_priority:
                await jobq.aio.enqueue("email", priority=99, conn=aconn)
            with pytest.raises(InvalidArgument) as bad_row:
                await jobq.aio.enqueue_many([{"type": "a"}, {"type": ""}], conn=aconn)
            with pytest.raises(JobNotFound):
                await jobq.aio.get(10**12, conn=aconn)
            with pytest.raises(InvalidArgument) as sync_conn:
                with psycopg.connect(database_url) as plain:
                    await jobq.aio.enqueue("email", conn=plain)
            return bad_priority.value, bad_row.value, sync_conn.value

    bad_priority, bad_row, sync_conn = run(scenario())
    with pytest.raises(InvalidArgument) as sync_priority:
        jobq.enqueue("email", priority=99, conn=conn)
    assert (bad_priority.field, bad_priority.message) == (sync_priority.value.field, sync_priority.value.message)
    assert bad_row.field.startswith("jobs[1]")
    assert sync_conn.field == "conn"


def test_many_jobs_a_listing_a_cancel_and_a_workflow_as_coroutines(conn, database_url):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            many = await jobq.aio.enqueue_many(
                [{"type": "a", "tags": ["x"]}, {"type": "b", "idempotency_key": "k"}, {"type": "b", "queue": "q"}],
                conn=aconn,
            )
            again = await jobq.aio.enqueue("b", idempotency_key="k", conn=aconn)
            page = await jobq.aio.list_jobs(type="b", conn=aconn)
            cancelled = await jobq.aio.cancel(many[0].id, actor="tester", conn=aconn)
            with pytest.raises(JobNotCancellable):
                await jobq.aio.cancel(many[0].id, conn=aconn)
            flow = jobq.chain(jobq.step("a", name="first"), jobq.step("b", name="second"))
            workflow_run = await jobq.aio.enqueue_workflow(flow, conn=aconn)
            read_back = await jobq.aio.get_workflow(workflow_run.id, conn=aconn)
            return many, again, page, cancelled, workflow_run, read_back

    many, again, page, cancelled, workflow_run, read_back = run(scenario())
    assert [job.type for job in many] == ["a", "b", "b"] and again.id == many[1].id
    assert {job.id for job in page.items} == {many[1].id, many[2].id} and page.total == 2
    assert (cancelled.status, cancelled.cancelled_by) == ("cancelled", "tester")
    assert {name: job.status for name, job in workflow_run.jobs.items()} == {"first": "pending", "second": "waiting"}
    assert read_back.id == workflow_run.id


def test_without_a_connection_the_async_pool_commits_each_call(conn):
    async def scenario():
        try:
            job = await jobq.aio.enqueue("email", {"n": 1})
            jobs = await asyncio.gather(*(jobq.aio.enqueue("email", {"n": n}) for n in range(2, 12)))
            return job, jobs, await jobq.aio.get(job.id)
        finally:
            await jobq.aio.close()

    job, jobs, read_back = run(scenario())
    assert read_back == job
    assert jobq.list_jobs(conn=conn).total == 11
    assert len({j.id for j in jobs}) == 10


def test_a_sqlalchemy_async_session_on_psycopg_is_a_connection_too(conn, database_url):
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    async def scenario():
        # The test database's URL is libpq's key=value form: psycopg connects, SQLAlchemy pools.
        engine = create_async_engine("postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(database_url))
        try:
            async with AsyncSession(engine) as session:
                await session.execute(text("SELECT 1"))
                kept = await jobq.aio.enqueue("email", conn=session)
                await session.commit()
                dropped = await jobq.aio.enqueue("email", conn=session)
                await session.rollback()
            return kept, dropped
        finally:
            await engine.dispose()

    kept, dropped = run(scenario())
    assert jobq.get(kept.id, conn=conn).status == "pending"
    with pytest.raises(JobNotFound):
        jobq.get(dropped.id, conn=conn)


def test_the_event_loop_runs_other_tasks_while_a_call_waits_on_the_database(conn, database_url):
    """The call runs in a thread: a statement blocked on a lock leaves the loop free."""

    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url) as aconn:
            with psycopg.connect(database_url) as locker:
                locker.execute("LOCK TABLE jobq_audit IN ACCESS EXCLUSIVE MODE")
                job = jobq.enqueue("email", conn=conn)
                ticks = 0

                async def tick():
                    nonlocal ticks
                    while True:
                        ticks += 1
                        await asyncio.sleep(0.01)

                ticker = asyncio.create_task(tick())
                cancel = asyncio.create_task(jobq.aio.cancel(job.id, conn=aconn))  # its audit row waits for the lock
                await asyncio.sleep(0.5)
                assert not cancel.done()
                locker.rollback()
                cancelled = await cancel
                ticker.cancel()
                await aconn.commit()
                return cancelled, ticks

    cancelled, ticks = run(scenario())
    assert cancelled.status == "cancelled"
    assert ticks >= 10  # the loop ticked while the statement waited
