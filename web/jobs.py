"""``/jobs``: enqueue (one or a batch), read, list and delete jobs (the actions on one
job are :mod:`web.job_actions`)."""

from __future__ import annotations

from flask import request

import jobq
from jobq.errors import InvalidArgument
from jobq.handlers import known
from jobq.jobs.submit import submit
from jobq.workflows.waiting import wait_all
from jobq.observe import tracing
from web import jsonio
from web.auth import request_actor
from web.blueprints import header_parameters, resource
from web.context import api
from web.schemas import (
    IDEMPOTENCY_KEY,
    EnqueueHeaders,
    Error,
    JobBatch,
    JobBatchOut,
    JobBody,
    JobListQuery,
    JobOut,
    JobPage,
    JobPath,
    ValidationFailure,
)
from web.schemas_workflows import JobWaitQuery

# W3C Trace Context: the client's span, made the parent of the enqueue's producer span
# (jobq.observe.tracing; with OpenTelemetry and a tracer provider in the web process).
TRACEPARENT = "traceparent"

jobs = resource("jobs", __name__, "The job ledger")
jobs.before_request(jsonio.require_json_body)

BODY_ERRORS = {400: Error, 413: Error, 415: Error, 422: ValidationFailure, 429: Error}


# The Idempotency-Key header is read by the route, not declared as a parameter for
# flask-openapi3 to validate: that copies and validates every header of every request,
# a tenth of the cost of a POST. It is documented from the same model that validates it.
@jobs.post(
    "/jobs",
    responses={201: JobOut, 200: JobOut, **BODY_ERRORS},
    openapi_extensions={"parameters": header_parameters(EnqueueHeaders)},
)
def create_job(body: JobBody) -> tuple[dict, int]:
    """Enqueue a job.

    201 with the new job; 200 with the job that holds the Idempotency-Key (header, or
    the body's idempotency_key) in its scope (unique_while), if one does. With
    JOBQ_UNKNOWN_TYPES=reject, 422 when no live worker has a handler for its type.
    """
    spec = _with_key(body, _idempotency_key())
    spec.key_scope()  # a scope without a key: 422 before the job joins a grouped insert
    if api().settings.unknown_types == "reject":  # 422 for a type no live worker has a handler for
        with api().database.connection() as conn:
            known.check(spec.type, "reject", conn=conn)
    with tracing.continued(request.headers.get(TRACEPARENT)):
        if spec.idempotency_key is None:  # a producer span of this request's own: its job's, in a group
            with tracing.producing(spec.queue, 1) as traceparent:
                return api().enqueuer.submit(spec, traceparent).to_dict(), 201
        with api().database.connection() as conn:
            entry = submit(spec, conn=conn, max_pending=api().settings.max_pending)
    return entry.job.to_dict(), 201 if entry.created else 200


@jobs.post("/jobs/batch", responses={201: JobBatchOut, **BODY_ERRORS})
def create_jobs(body: JobBatch) -> tuple[dict, int]:
    """Enqueue up to 1,000 jobs at once: all or none, in one statement."""
    with tracing.continued(request.headers.get(TRACEPARENT)):
        jobs_added = api().submit_many(list(body.jobs))
    return {"jobs": [job.to_dict() for job in jobs_added]}, 201


@jobs.get("/jobs/<int:job_id>", responses={200: JobOut, 400: Error, 404: Error})
def get_job(path: JobPath, query: JobWaitQuery) -> dict:
    """One job. With ``?wait=N`` (N <= 25 seconds): answers once the job is done, dead or
    cancelled, or after N seconds with the job as it then is; no database connection is
    held while it waits (a notification wakes it)."""
    if query.wait:
        try:
            wait_all([path.job_id], query.wait, url=api().settings.require_database_url(), pool=api().database)
        except TimeoutError:
            pass  # the job as it is now
    with api().database.connection() as conn:
        return jobq.get(path.job_id, conn=conn).to_dict()


@jobs.get("/jobs", responses={200: JobPage, 400: Error})
def list_jobs(query: JobListQuery) -> dict:
    """Jobs, newest first (id breaks ties), filtered and paginated: by offset, or by
    cursor (each page's next_cursor; before= starts after a given job)."""
    with api().database.connection() as conn:
        page = jobq.list_jobs(**query.model_dump(), conn=conn)
    return jsonio.page_dict(page, cursors=True)


@jobs.delete("/jobs/<int:job_id>", responses={204: None, 400: Error, 404: Error, 409: Error})
def delete_job(path: JobPath) -> tuple[str, int]:
    """Delete a pending job. 409 once it is claimed, running or finished (cancel it instead)."""
    with api().database.connection() as conn:
        jobq.delete(path.job_id, actor=request_actor(conn), conn=conn)
    return "", 204



def _idempotency_key() -> str | None:
    """The Idempotency-Key header, validated (a ValidationError answers 422)."""
    value = request.headers.get(IDEMPOTENCY_KEY)
    return None if value is None else EnqueueHeaders.model_validate({IDEMPOTENCY_KEY: value}).idempotency_key


def _with_key(body: JobBody, key: str | None) -> JobBody:
    """The body with the Idempotency-Key header's key; InvalidArgument if it names another."""
    if key is None or key == body.idempotency_key:
        return body
    if body.idempotency_key is not None:
        raise InvalidArgument("Idempotency-Key", "differs from the body's idempotency_key")
    return body.model_copy(update={"idempotency_key": key})
