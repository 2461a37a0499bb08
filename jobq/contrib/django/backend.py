"""``JobqBackend``: Django's tasks framework on jobq.

    TASKS = {"default": {"BACKEND": "jobq.contrib.django.JobqBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"DATABASE": "default", "MAX_RETRIES": 3}}}

A task's ``.enqueue()`` writes a job on Django's own database connection (``OPTIONS
DATABASE``, default ``"default"``): inside ``transaction.atomic()`` it commits or rolls
back with the block (no ``on_commit`` needed). ``run_after`` is the job's ``run_at``,
the priority is mapped (:mod:`jobq.contrib.django.results`), the queue is the task's
``queue_name``. jobq workers run the task function, found by its import path
(:mod:`jobq.contrib.django.runner`; ``manage.py jobq_worker``). ``get_result(id)``
reads the job back as the framework's ``TaskResult``. The async variants go through
:mod:`jobq.aio`.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string

import jobq.aio
from jobq.contrib.django.compat import BaseTaskBackend, Task, TaskResult, TaskResultDoesNotExist, task_enqueued
from jobq.contrib.django.database import psycopg_connection
from jobq.contrib.django.results import jobq_priority, payload, task_result
from jobq.contrib.django.runner import TASK_TYPE
from jobq.errors import JobNotFound, InvalidArgument
from jobq.job import Job
from jobq.jobs import ledger, submit


class JobqBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True  # async def tasks run on the worker's event loop
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.database = self.options.get("DATABASE", "default")
        self.max_retries = self.options.get("MAX_RETRIES")

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Write the task's job in Django's transaction (the caller commits, as for any
        write on Django's connection) and return its READY result."""
        self.validate_task(task)
        job = submit.enqueue(**self._job(task, args, kwargs), conn=psycopg_connection(self.database))
        return self._enqueued(job, task)

    async def aenqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """:meth:`enqueue` from async code, on jobq's async pool (committed at once:
        Django's async ORM has no transaction to share)."""
        self.validate_task(task)
        return self._enqueued(await jobq.aio.enqueue(**self._job(task, args, kwargs)), task)

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result as it is now; raises TaskResultDoesNotExist for an id that is
        no job of a task."""
        return self._result(result_id, lambda job_id: ledger.get(job_id, conn=psycopg_connection(self.database)))

    async def aget_result(self, result_id: str) -> TaskResult:
        job = await self._aget(result_id)
        return self._result(result_id, lambda _: job)

    def _job(self, task: Task, args: Any, kwargs: Any) -> dict[str, Any]:
        """jobq.enqueue's arguments for a run of ``task``."""
        options = {
            "type": TASK_TYPE,
            "payload": payload(task, list(args), dict(kwargs), self.alias),
            "priority": jobq_priority(task.priority),
            "run_at": task.run_after,
            "queue": task.queue_name,
        }
        if self.max_retries is not None:
            options["max_retries"] = self.max_retries
        return options

    def _enqueued(self, job: Job, task: Task) -> TaskResult:
        result = task_result(job, task, self.alias)
        task_enqueued.send(type(self), task_result=result)
        return result

    async def _aget(self, result_id: str) -> Job | None:
        try:
            return await jobq.aio.get(int(result_id))
        except (ValueError, InvalidArgument, JobNotFound):
            return None

    def _result(self, result_id: str, read: Any) -> TaskResult:
        try:
            job = read(int(result_id))
        except (ValueError, InvalidArgument, JobNotFound):
            job = None
        if job is None or job.type != TASK_TYPE:
            raise TaskResultDoesNotExist(result_id)
        return task_result(job, import_string(job.payload["task"]), self.alias)
