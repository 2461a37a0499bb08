"""A workflow as it is stored: :class:`WorkflowRun` (its steps' current jobs and edges),
read by id (:func:`get_workflow`) or listed newest first (:func:`list_workflows`)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from psycopg.rows import class_row, dict_row

from jobq.errors import InvalidArgument, WorkflowNotFound
from jobq.job import Job
from jobq.jobs.ledger import check_id
from jobq.store.connections import Connection, connection
from jobq.store.sql.enqueue import JOB_GET_BY_IDS
from jobq.store.sql.workflows import (
    WORKFLOW_GET,
    WORKFLOW_GET_EDGES,
    WORKFLOW_GET_STEP_OF_JOB,
    WORKFLOW_GET_STEPS,
    WORKFLOW_LIST,
    WORKFLOW_STATUS,
)

WORKFLOW_STATUSES = ("running", "done", "dead", "cancelled")
MAX_LIST_LIMIT = 500


@dataclasses.dataclass(slots=True)
class WorkflowStep:
    """A step as stored: its name, what a parent's failure does to it, how many parents
    it still waits for, and its current job (None once retention took it)."""

    name: str
    on_parent_failure: str
    parents_left: int
    spawned_by: str | None
    job: Job | None


@dataclasses.dataclass(slots=True)
class WorkflowRun:
    """An enqueued workflow: ``id``, ``jobs`` (step name -> its current :class:`Job`),
    and, when read back, its status, steps and edges (parent, child, outcome)."""

    id: int
    jobs: dict[str, Job]
    name: str | None = None
    status: str | None = None
    created_at: datetime | None = None
    steps: list[WorkflowStep] = dataclasses.field(default_factory=list)
    edges: list[tuple[str, str, str | None]] = dataclasses.field(default_factory=list)
    created: bool = True  # False: an earlier workflow held the submission's idempotency key

    def wait(self, timeout: float | None = None, *, conn: Connection | None = None) -> WorkflowRun:
        """Block until every step has finished (following retries and spawns); return the
        run read again. Raises :class:`TimeoutError` past ``timeout`` seconds (see
        :func:`jobq.wait`). ``conn``: for reading the run only (the waiter's marks go in
        on the default pool's connections)."""
        from jobq.workflows.waiting import wait_all

        wait_all([job.id for job in self.jobs.values()], timeout, follow=lambda: _current_ids(self.id, conn))
        return get_workflow(self.id, conn=conn)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "jobs": {name: job.id for name, job in self.jobs.items()},
            "steps": [
                {"name": s.name, "on_parent_failure": s.on_parent_failure, "parents_left": s.parents_left,
                 "spawned_by": s.spawned_by, "job_id": s.job.id if s.job else None,
                 "status": s.job.status if s.job else None, "type": s.job.type if s.job else None}
                for s in self.steps
            ],
            "edges": [{"parent": p, "child": c, "outcome": o} for p, c, o in self.edges],
        }


def get_workflow(workflow_id: int, *, conn: Connection | None = None) -> WorkflowRun:
    """The workflow with its steps (their current jobs) and edges. Raises
    :class:`WorkflowNotFound`."""
    check_id(workflow_id)
    with connection(conn) as c:
        head = c.execute(WORKFLOW_GET, {"id": workflow_id}).fetchone()
        if head is None:
            raise WorkflowNotFound(workflow_id)
        rows = c.execute(WORKFLOW_GET_STEPS, {"id": workflow_id}).fetchall()
        ids = [row[4] for row in rows]
        with c.cursor(row_factory=class_row(Job)) as cur:
            jobs = {job.id: job for job in cur.execute(JOB_GET_BY_IDS, {"ids": ids})}
        edges = [tuple(edge) for edge in c.execute(WORKFLOW_GET_EDGES, {"id": workflow_id})]
        (status,) = c.execute(WORKFLOW_STATUS, {"ids": ids}).fetchone()  # type: ignore[misc]
    steps = [WorkflowStep(name, on_failure, left, spawned_by, jobs.get(job_id))
             for name, on_failure, left, spawned_by, job_id in rows]
    return WorkflowRun(
        id=head[0], name=head[1], created_at=head[3], status=status, steps=steps, edges=edges,  # type: ignore[arg-type]
        jobs={s.name: s.job for s in steps if s.job is not None},
    )


def list_workflows(
    *, status: str | None = None, before: int | None = None, limit: int = 50, conn: Connection | None = None
) -> list[dict[str, Any]]:
    """Workflows newest first: id, name, created_at, steps, done (steps done), status.
    ``before``: the keyset cursor (the last id of the previous page)."""
    if status is not None and status not in WORKFLOW_STATUSES:
        raise InvalidArgument("status", f"must be one of {', '.join(WORKFLOW_STATUSES)}")
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument("limit", f"must be 1-{MAX_LIST_LIMIT}")
    if before is not None:
        check_id(before, "before")
    params = {"status": status, "before": before or 2**63 - 1, "limit": limit,
              "scan": limit if status is None else None}  # a status is known only once computed
    with connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
        return cur.execute(WORKFLOW_LIST, params).fetchall()


@dataclasses.dataclass(frozen=True, slots=True)
class StepOfJob:
    """The step a job is now: its workflow, its name, and its parents as (step name, job
    id, status); a job no step points at (retried since) has none."""

    workflow_id: int
    name: str
    parents: list[tuple[str, int, str | None]]


def step_of_job(job_id: int, *, conn: Connection | None = None) -> StepOfJob | None:
    """The step ``job_id`` is now, or None."""
    with connection(conn) as c:
        rows = c.execute(WORKFLOW_GET_STEP_OF_JOB, {"id": job_id}).fetchall()
    if not rows:
        return None
    parents = [(name, parent_id, status) for _, _, name, parent_id, status in rows if name is not None]
    return StepOfJob(rows[0][0], rows[0][1], parents)


def _current_ids(workflow_id: int, conn: Connection | None) -> list[int]:
    """The jobs a workflow's steps are now (a retry or a spawn may have added some)."""
    return [s.job.id for s in get_workflow(workflow_id, conn=conn).steps if s.job is not None]
