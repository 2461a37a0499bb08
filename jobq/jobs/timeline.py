"""One job's story in order, as the dashboard's job page and ``jobq show`` tell it:
created, due (when it was scheduled), each failed attempt, claimed, started, the outcome.
A step still to come (a scheduled job's due time) is marked as such, never told as if
it had happened."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from jobq.job import Job


@dataclass(frozen=True)
class Step:
    at: datetime | None
    what: str
    detail: str = ""
    future: bool = False  # at is still to come (as of the ``now`` given to timeline)


def timeline(job: Job, now: datetime, *, place: str | None = None) -> list[Step]:
    """The job's steps in time order. ``place``: how to name the worker that claimed
    it (default: its id)."""
    steps = [Step(job.created_at, "created", f"queue {job.queue}, priority {job.priority}")]
    if job.run_at > job.created_at:
        due = job.run_at > now and job.status == "pending"
        steps.append(Step(job.run_at, "due" if due else "was due", "run_at", future=due))
    for failure in job.errors or []:
        at = failure.get("at")
        when = datetime.fromisoformat(at) if isinstance(at, str) else None
        lines = str(failure.get("error") or "").strip().splitlines()
        steps.append(Step(when, f"attempt {failure.get('attempt', '?')} failed", lines[-1] if lines else ""))
    if job.claimed_at:
        worker = place or job.worker_id
        steps.append(Step(job.claimed_at, "claimed", f"by {worker}" if worker else ""))
    if job.started_at:
        steps.append(Step(job.started_at, "started", f"attempt {job.attempt}"))
    if job.completed_at:
        outcome = {"cancelled": f"cancelled by {job.cancelled_by or '?'}"}.get(job.status, job.status)
        steps.append(Step(job.completed_at, outcome))
    return sorted(steps, key=lambda s: s.at or datetime.min.replace(tzinfo=timezone.utc))
