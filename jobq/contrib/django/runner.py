"""The job type that runs Django tasks in jobq workers: ``django_task``.

A job's payload names its task by import path (``task``, the ``Task`` object a
``@task`` decorator made) with its ``args`` and ``kwargs``; the worker imports it and
calls the task's function (a task that ``takes_context`` gets a ``TaskContext`` first).
An ``async def`` task returns its coroutine, which the worker runs on its event loop
(:mod:`jobq.handlers.coroutines`). Django's database connections are closed when
unusable or past their ``CONN_MAX_AGE``, before and after each task, as Django does
around a request. Imported by the backend, and by every worker of ``manage.py
jobq_worker`` (through ``JOBQ_HANDLERS``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.db import close_old_connections
from django.utils.module_loading import import_string

import jobq
from jobq.contrib.django.compat import TaskContext
from jobq.contrib.django.results import task_result

TASK_TYPE = "django_task"


@jobq.register(TASK_TYPE)
def run_task(job: jobq.Job) -> Any:
    """Call the task of ``job`` with its arguments; its return value is the result."""
    task = import_string(job.payload["task"])
    args, kwargs = job.payload.get("args", []), job.payload.get("kwargs", {})
    if task.takes_context:
        running = dataclasses.replace(job, status="running")  # as the row says once this run shows
        args = [TaskContext(task_result=task_result(running, task, job.payload.get("backend", "default"))), *args]
    close_old_connections()
    try:
        return task.func(*args, **kwargs)
    finally:
        close_old_connections()
