"""``/jobs/{id}/<action>``: what an operator does to one job. These routes take no body
(so they are not behind the jobs blueprint's JSON-body check); each action is recorded
in the audit trail under the request's actor."""

from __future__ import annotations

import jobq
from web.auth import request_actor
from web.blueprints import resource
from web.context import api
from web.schemas import Error, JobOut, JobPath

job_actions = resource("job_actions", __name__, "Acting on one job: cancel, retry, run now")


@job_actions.post("/jobs/<int:job_id>/cancel", responses={200: JobOut, 400: Error, 404: Error, 409: Error})
def cancel_job(path: JobPath) -> dict:
    """Cancel a job that has not finished: a pending or claimed one at once; a running
    one's handler gets jobq.Cancelled within about a second, and its worker is killed
    if it has not returned JOBQ_CANCEL_GRACE seconds later. 409 with the status of a job
    already done, dead or cancelled."""
    with api().database.connection() as conn:
        return jobq.cancel(path.job_id, actor=request_actor(conn), conn=conn).to_dict()


@job_actions.post("/jobs/<int:job_id>/retry", responses={201: JobOut, 400: Error, 404: Error, 409: Error})
def retry_job(path: JobPath) -> tuple[dict, int]:
    """A new pending job from a dead one (the replay of its dead letter) or a cancelled
    one (a copy): 201 with the new job; the original records it (retried_as). Once: 409
    naming the job it was retried as, or with the status of a job neither dead nor
    cancelled."""
    with api().database.connection() as conn:
        return jobq.retry(path.job_id, actor=request_actor(conn), conn=conn).to_dict(), 201


@job_actions.post("/jobs/<int:job_id>/run-now", responses={200: JobOut, 400: Error, 404: Error, 409: Error})
def run_job_now(path: JobPath) -> dict:
    """Make a pending job scheduled in the future due now; 409 for a job already due or
    not pending."""
    with api().database.connection() as conn:
        return jobq.run_now(path.job_id, actor=request_actor(conn), conn=conn).to_dict()
