"""What the routes of one app share: its settings and its database pool."""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, current_app

from jobq.store.connections import ProcessPool
from jobq.jobs.group_commit import GroupSubmitter
from jobq.job import Job
from jobq.settings import DEFAULT_API_STATEMENT_TIMEOUT, Settings
from jobq.spec import JobSpec
from jobq.jobs.submit import submit_many, submit_reserved
from web.pool import POOL_TIMEOUT, web_pool

EXTENSION = "jobq"


@dataclass(frozen=True)
class ApiContext:
    """The app's configuration and database access; built once per app, before any fork."""

    settings: Settings
    database: ProcessPool
    enqueuer: GroupSubmitter
    """Inserts the jobs of concurrent ``POST /jobs`` (without idempotency keys) together."""

    def submit_many(self, specs: list[JobSpec]) -> list[Job]:
        """Insert jobs in one statement, with admission control; see :func:`jobq.jobs.submit.submit_many`."""
        with self.database.connection() as conn:
            return [entry.job for entry in submit_many(specs, conn=conn, max_pending=self.settings.max_pending)]

    def submit_reserved(self, specs: list[JobSpec], ids: list[int] | None, traceparents: list[str | None]) -> list[Job]:
        """The enqueuer's insert (:func:`jobq.jobs.submit.submit_reserved`): admission control
        for a first attempt, none for a retry that settles one (it was admitted)."""
        max_pending = self.settings.max_pending if ids is None else None
        with self.database.connection() as conn:
            return submit_reserved(specs, ids, conn=conn, max_pending=max_pending, traceparents=traceparents)


def attach(app: Flask, settings: Settings) -> ApiContext:
    """Give ``app`` its context (no connection is opened here).

    A request queued behind the insert in flight waits as long as that insert may take
    (a wait for a connection, then a statement) before it answers 503.
    """
    statement_timeout = settings.api_statement_timeout
    database = web_pool(settings.require_database_url(), statement_timeout=statement_timeout)
    wait = POOL_TIMEOUT + (statement_timeout or DEFAULT_API_STATEMENT_TIMEOUT)
    enqueuer = GroupSubmitter(
        lambda specs, ids, traceparents: context.submit_reserved(specs, ids, traceparents), wait_timeout=wait
    )
    context = ApiContext(settings, database, enqueuer)
    app.extensions[EXTENSION] = context
    return context


def api() -> ApiContext:
    """The context of the app handling the current request."""
    return current_app.extensions[EXTENSION]  # type: ignore[no-any-return]
