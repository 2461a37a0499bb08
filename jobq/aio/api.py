"""The library's calls as coroutines: the same functions as the sync API, run by
:func:`jobq.aio.bridge.call` on the caller's ``AsyncConnection`` (the caller commits) or
on jobq's async pool (committed before the coroutine returns). Same arguments, same
validation, same errors, same rows as the functions each one names."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from jobq.aio.bridge import call
from jobq.job import Job
from jobq.jobs import control, ledger, submit
from jobq.jobs.ledger import Page
from jobq.workflows import waiting
from jobq.workflows.definition import Workflow
from jobq.workflows.runs import WorkflowRun, get_workflow as _get_workflow
from jobq.workflows.submission import submit as _submit_workflow


async def enqueue(type: str, payload: Mapping[str, Any] | None = None, *, conn: Any = None, **options: Any) -> Job:
    """:func:`jobq.enqueue` (``priority``, ``run_at``, ``queue``, ``idempotency_key``,
    ``tags``, ``unique_while``, ...) on ``conn``, an ``AsyncConnection``: the job
    exists, and wakes a worker, when the caller commits."""
    return await call(submit.enqueue, type, payload, conn=conn, **options)


async def enqueue_many(jobs: Iterable[Mapping[str, Any]], *, conn: Any = None) -> list[Job]:
    """:func:`jobq.enqueue_many`: all or nothing, in one round trip."""
    return await call(submit.enqueue_many, list(jobs), conn=conn)


async def enqueue_workflow(workflow: Workflow, *, conn: Any = None, idempotency_key: str | None = None) -> WorkflowRun:
    """``workflow.enqueue()`` (:func:`jobq.workflows.submission.submit`): every step in
    one statement, in the caller's transaction."""
    return await call(_submit_workflow, workflow, conn=conn, idempotency_key=idempotency_key)


async def get(job_id: int, *, conn: Any = None) -> Job:
    """:func:`jobq.get`: raises :class:`jobq.JobNotFound`."""
    return await call(ledger.get, job_id, conn=conn)


async def get_workflow(workflow_id: int, *, conn: Any = None) -> WorkflowRun:
    """:func:`jobq.get_workflow`."""
    return await call(_get_workflow, workflow_id, conn=conn)


async def list_jobs(*, conn: Any = None, **filters: Any) -> Page[Job]:
    """:func:`jobq.list_jobs` (``status``, ``type``, ``queue``, ``tag``, ``limit``,
    ``cursor``, ...): one page."""
    return await call(ledger.list_jobs, conn=conn, **filters)


async def cancel(job_id: int, *, actor: str | None = None, conn: Any = None) -> Job:
    """:func:`jobq.cancel`: a running job's handler is asked to stop (an ``async def``
    one sees ``asyncio.CancelledError``)."""
    return await call(control.cancel, job_id, actor=actor, conn=conn)


async def wait(job_id: int, timeout: float | None = None) -> Job:
    """:func:`jobq.wait`: the job once done, dead or cancelled. Woken by the process's
    one listener (:mod:`jobq.workflows.waiting`), in a thread of the loop's default
    executor (no connection held while it waits): the loop goes on meanwhile. Raises
    :class:`TimeoutError` past ``timeout``."""
    return await asyncio.to_thread(waiting.wait, job_id, timeout)


async def result(job_id: int, timeout: float | None = None) -> Any:
    """:func:`jobq.result`: the job's result once done; :class:`jobq.JobFailed` if it
    ended dead or cancelled."""
    return await asyncio.to_thread(waiting.result, job_id, timeout)
