"""``/dashboard/jobs/<id>``: every field of one job, its timeline and each failed
attempt's traceback; the actions its status allows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from flask import Response, redirect, url_for

import jobq
from jobq.job import Job
from jobq.workflows.runs import step_of_job
from web.dashboard import common, security
from web.dashboard.format import worker_place
from web.dashboard.blueprints import actions, pages


@dataclass(frozen=True)
class Step:
    at: datetime | None
    what: str
    detail: str = ""


def timeline(job: Job) -> list[Step]:
    """created → scheduled → claimed → started → each failed attempt → outcome, in order."""
    steps = [Step(job.created_at, "created", f"queue {job.queue}, priority {job.priority}")]
    if job.run_at > job.created_at:
        steps.append(Step(job.run_at, "due", "run_at"))
    for failure in job.errors or []:
        at = failure.get("at")
        when = datetime.fromisoformat(at) if isinstance(at, str) else None
        lines = str(failure.get("error") or "").strip().splitlines()
        steps.append(Step(when, f"attempt {failure.get('attempt', '?')} failed", lines[-1] if lines else ""))
    if job.claimed_at:
        steps.append(Step(job.claimed_at, "claimed", f"by {worker_place(job.worker_id)}" if job.worker_id else ""))
    if job.started_at:
        steps.append(Step(job.started_at, "started", f"attempt {job.attempt}"))
    if job.completed_at:
        outcome = {"cancelled": f"cancelled by {job.cancelled_by or '?'}"}.get(job.status, job.status)
        steps.append(Step(job.completed_at, outcome))
    return sorted(steps, key=lambda s: s.at or datetime.min.replace(tzinfo=timezone.utc))


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
        step = step_of_job(job_id, conn=conn) if found.workflow_id is not None else None
    return common.page(
        "job.html", f"Job {job_id}", job=found, timeline=timeline(found), step=step,
        actions=valid_actions(found, datetime.now(timezone.utc)),
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
