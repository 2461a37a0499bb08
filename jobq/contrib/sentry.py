"""Handler exceptions to Sentry, one Sentry issue per cause (``pip install 'jobq[sentry]'``).

    import sentry_sdk
    import jobq.contrib.sentry

    sentry_sdk.init(dsn=...)
    jobq.contrib.sentry.install()                        # every failed run
    jobq.contrib.sentry.install(dead_letters_only=True)  # only runs that dead-letter the job

Call it in a handler module (JOBQ_HANDLERS): the supervisor imports those before it forks
its workers, and each worker reports its own runs. Each event carries the job (id, type,
queue, attempt, max_retries, tags) as the ``jobq`` context and type, queue and group as
tags; its fingerprint is the job's dead-letter group (``jobq dead groups``: the type and
the error's signature, with numbers, hex and uuids taken out), so "order 17 not found"
and "order 4017 not found" are one Sentry issue, as they are one group. The signature is
computed by the database's own function (one statement per failed run, on the default
pool: DATABASE_URL); if it cannot be had, the event goes with Sentry's own grouping.
"""

from __future__ import annotations

import logging

import sentry_sdk

from jobq.errors import DatabaseUnavailable
from jobq.handlers import execution
from jobq.handlers.execution import RunResult
from jobq.handlers.registry import Handler
from jobq.job import Job
from jobq.jobs.dead_letters import signature_of

log = logging.getLogger(__name__)

FINGERPRINT_PREFIX = "jobq-dead-letter-group"

_options = {"dead_letters_only": False}


def install(*, dead_letters_only: bool = False) -> None:
    """Report every failed run of a handler to Sentry from now on (``dead_letters_only``:
    only the runs after which the job is dead: its retries spent, or the handler's
    ``discard_on``/``retry_on`` refusing a retry). Installing twice changes the option."""
    _options["dead_letters_only"] = dead_letters_only
    execution.on_failure(report)


def is_last_run(job: Job, handler: Handler | None, result: RunResult) -> bool:
    """Whether this failed run sends ``job`` to the dead letters (the rule of
    :data:`jobq.store.sql.outcomes.JOB_FAIL_IF_LEASED`: no attempt left under the
    handler's ``max_retries``, else the job's; or the handler's policy refused a retry)."""
    limit = handler.max_retries if handler is not None and handler.max_retries is not None else job.max_retries
    return result.not_retried is not None or job.attempt >= limit


def report(job: Job, handler: Handler | None, exc: Exception, result: RunResult) -> None:
    """The failure hook: one Sentry event for ``exc`` with the job's context and its
    dead-letter group as fingerprint."""
    dead = is_last_run(job, handler, result)
    if _options["dead_letters_only"] and not dead:
        return
    with sentry_sdk.new_scope() as scope:
        scope.set_context("jobq", {
            "id": job.id, "type": job.type, "queue": job.queue, "attempt": job.attempt,
            "max_retries": job.max_retries, "tags": job.tags or [], "dead_letter": dead,
        })
        scope.set_tag("jobq.type", job.type)
        scope.set_tag("jobq.queue", job.queue)
        scope.set_tag("jobq.dead_letter", "yes" if dead else "no")
        try:
            signature, group = signature_of(job.type, result.error or "")
        except DatabaseUnavailable as failure:
            log.warning("sentry.no_signature id=%s type=%s error=%s", job.id, job.type, failure)
        else:
            scope.set_tag("jobq.dead_letter_group", group)
            scope.set_extra("jobq.signature", signature)
            scope.fingerprint = [FINGERPRINT_PREFIX, group]
        sentry_sdk.capture_exception(exc)
