"""Django's tasks framework where it is: ``django.tasks`` (Django 6) or the
``django-tasks`` backport (module ``django_tasks``, for Django 5.2 on Python 3.11).
Everything of the framework that jobq uses is named here, once."""

from __future__ import annotations

try:  # Django 6
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
except ImportError:  # the backport
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "BaseTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
]
