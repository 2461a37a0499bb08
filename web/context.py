"""What the routes of one app share: its settings and its database pool."""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, current_app

from jobq.db import ProcessPool
from jobq.group import GroupSubmitter
from jobq.job import Job
from jobq.settings import Settings
from jobq.spec import JobSpec
from jobq.submit import submit_many
from web.pool import web_pool

EXTENSION = "jobq"


@dataclass(frozen=True)
class ApiContext:
    """The app's configuration and database access; built once per app, before any fork."""

    settings: Settings
    database: ProcessPool
    enqueuer: GroupSubmitter
    """Inserts the jobs of concurrent ``POST /jobs`` (without idempotency keys) together."""

    def submit_many(self, specs: list[JobSpec]) -> list[Job]:
        """Insert jobs in one statement, with admission control; see :func:`jobq.submit.submit_many`."""
        with self.database.connection() as conn:
            return [entry.job for entry in submit_many(specs, conn=conn, max_pending=self.settings.max_pending)]


def attach(app: Flask, settings: Settings) -> ApiContext:
    """Give ``app`` its context (no connection is opened here)."""
    database = web_pool(settings.require_database_url(), statement_timeout=settings.api_statement_timeout)
    context = ApiContext(settings, database, GroupSubmitter(lambda specs: context.submit_many(specs)))
    app.extensions[EXTENSION] = context
    return context


def api() -> ApiContext:
    """The context of the app handling the current request."""
    return current_app.extensions[EXTENSION]  # type: ignore[no-any-return]
