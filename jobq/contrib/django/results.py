"""Between Django's tasks and jobq's jobs: priorities, statuses and results.

Priority: Django's −100..100 (default 0) onto jobq's 1..10 (default 5), in order, by
``1 + (priority + 100) * 9 // 200``: −100 → 1, 0 → 5, 100 → 10; each jobq priority
holds about 22 of Django's (jobq runs higher first, as Django means).

Status: a job ``pending``, ``waiting`` or ``claimed`` is ``READY`` (a failed run
retried later too: its errors are in ``errors``); ``running`` is ``RUNNING``; ``done``
is ``SUCCESSFUL``; ``dead``, ``cancelled`` (and the legacy ``failed``) are ``FAILED``.
"""

from __future__ import annotations

from typing import Any

from jobq.contrib.django.compat import Task, TaskError, TaskResult, TaskResultStatus
from jobq.job import Job

TASK_MIN_PRIORITY, TASK_MAX_PRIORITY = -100, 100

STATUSES = {
    "pending": TaskResultStatus.READY,
    "waiting": TaskResultStatus.READY,
    "claimed": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "done": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
    "failed": TaskResultStatus.FAILED,
}


def jobq_priority(priority: int) -> int:
    """jobq's priority (1..10) for Django's (−100..100)."""
    return 1 + (priority - TASK_MIN_PRIORITY) * 9 // (TASK_MAX_PRIORITY - TASK_MIN_PRIORITY)


def payload(task: Task, args: Any, kwargs: Any, backend: str) -> dict[str, Any]:
    """The job's payload: the task found again by its import path, its arguments."""
    return {"task": task.module_path, "args": args, "kwargs": kwargs, "backend": backend}


def task_result(job: Job, task: Task, backend: str) -> TaskResult:
    """The framework's TaskResult for ``job``, a run of ``task``."""
    runs = [entry.get("worker_id") or "" for entry in job.errors]
    if job.status in ("running", "done") and job.worker_id:
        runs.append(job.worker_id)
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=STATUSES[job.status],
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.completed_at if job.status in ("done", "dead", "cancelled", "failed") else None,
        last_attempted_at=job.started_at,
        args=job.payload.get("args", []),
        kwargs=job.payload.get("kwargs", {}),
        backend=backend,
        errors=[_error(entry["error"]) for entry in job.errors if entry.get("error")],
        worker_ids=runs,
    )
    if job.status == "cancelled" and not result.errors:
        result.errors.append(TaskError(exception_class_path="jobq.errors.Cancelled", traceback="cancelled"))
    if job.status == "done":
        object.__setattr__(result, "_return_value", job.result)
    return result


def _error(text: str) -> TaskError:
    """A run's error as the framework has it: the exception's class from the traceback's
    last line (``module.Class: message``; builtins unqualified), and the traceback."""
    last = text.strip().splitlines()[-1] if text.strip() else ""
    name = last.split(":", 1)[0].strip() if ":" in last else ""
    if not name or " " in name:
        name = "Exception"
    path = name if "." in name else f"builtins.{name}"
    return TaskError(exception_class_path=path, traceback=text)
