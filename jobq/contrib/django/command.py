"""What ``manage.py jobq_worker`` and ``manage.py jobq_migrate`` share: running a
``jobq`` command (:mod:`jobq.cli`, the one room that may start the daemon) in the
Django project's process, with the project's database.

``DATABASE_URL``, when not set, is made from ``DATABASES`` (the jobq backend's
``OPTIONS DATABASE``); the worker's ``JOBQ_HANDLERS`` gain the runner of Django tasks
(:mod:`jobq.contrib.django.runner`); its ``--queues``, when not given, are the jobq
backends' ``QUEUES``. Django is set up before the supervisor forks (each worker process
starts with it) and its connections are closed first, so that no worker shares a
socket of its parent's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from django.conf import settings
from django.db import connections

from jobq.cli.main import main as jobq_cli
from jobq.contrib.django.backend import JobqBackend
from jobq.contrib.django.compat import task_backends
from jobq.contrib.django.database import database_url

RUNNER = "jobq.contrib.django.runner"


def backends() -> list[JobqBackend]:
    """The project's jobq backends (TASKS entries naming JobqBackend)."""
    found = [task_backends[alias] for alias in getattr(settings, "TASKS", {})]
    return [backend for backend in found if isinstance(backend, JobqBackend)]


def queues() -> list[str]:
    """The queues of the project's jobq backends, in order, each once."""
    return list(dict.fromkeys(queue for backend in backends() for queue in sorted(backend.queues)))


def run(argv: Sequence[str], *, worker: bool) -> None:
    """``jobq <argv>`` with the project's database (and, for the worker, its tasks'
    runner); exits with the command's status (SystemExit, as ``jobq`` does)."""
    if not os.environ.get("DATABASE_URL"):
        found = backends()
        os.environ["DATABASE_URL"] = database_url(found[0].database if found else "default")
    if worker:
        handlers = [name for name in os.environ.get("JOBQ_HANDLERS", "").split(",") if name.strip()]
        os.environ["JOBQ_HANDLERS"] = ",".join([*handlers, RUNNER] if RUNNER not in handlers else handlers)
    connections.close_all()
    jobq_cli.main(args=list(argv), prog_name="manage.py", standalone_mode=True)
