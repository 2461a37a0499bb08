"""``/dashboard/jobs/<id>``: every field of one job, its timeline and each failed
attempt's traceback; the actions its status allows."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from flask import Response, redirect, url_for

import jobq
from jobq.job import Job
from jobq.jobs import dead_letters
from jobq.jobs.timeline import timeline
from jobq.workflows.runs import step_of_job
from web.dashboard import common, security
from web.dashboard.format import worker_place
from web.dashboard.blueprints import actions, pages


def valid_actions(job: Job, now: datetime) -> list[tuple[str, str]]:
    """(route action, label) of the actions its status allows."""
    found = []
    if job.status in ("pending", "claimed", "running", "waiting"):
        found.append(("cancel", "Cancel"))
    if job.status == "pending" and job.run_at > now:
        found.append(("run-now", "Run now"))
    if job.status in ("dead", "cancelled") and job.retried_as is None and job.workflow_id is None:
        found.append(("retry", "Retry"))
    if job.status == "pending":
        found.append(("delete", "Delete"))
    return found


@pages.get("/jobs/<int:job_id>")
def job(job_id: int) -> str:
    with common.database() as conn:
        found = jobq.get(job_id, conn=conn)
        letter = dead_letters.group_of_job(job_id, conn=conn) if found.status == "dead" else None
        step = step_of_job(job_id, conn=conn) if found.workflow_id is not None else None
    now = datetime.now(timezone.utc)
    place = worker_place(found.worker_id) if found.worker_id else None
    return common.page(
        "job.html", f"Job {job_id}", job=found, timeline=timeline(found, now, place=place), step=step,
        actions=valid_actions(found, now), letter=letter,
        fields=_fields(found),
    )


def _fields(job: Job) -> list[tuple[str, Any]]:
    skip = {"payload", "result", "errors", "error", "progress", "parent_results", "parent_failures"}
    return [(name, getattr(job, name)) for name in Job.__dataclass_fields__ if name not in skip]


@actions.post('/jobs/<int:job_id>/<any(cancel, retry, "run-now", delete):action>')
def act(job_id: int, action: str) -> Response:
    actor = security.actor()
    with common.database() as conn:
        if action == "cancel":
            jobq.cancel(job_id, actor=actor, conn=conn)
        elif action == "retry":
            new = jobq.retry(job_id, actor=actor, conn=conn)
            return redirect(url_for("dashboard.job", job_id=new.id))
        elif action == "run-now":
            jobq.run_now(job_id, actor=actor, conn=conn)
        else:
            jobq.delete(job_id, actor=actor, conn=conn)
            return redirect(url_for("dashboard.jobs"))
    return redirect(url_for("dashboard.job", job_id=job_id))
