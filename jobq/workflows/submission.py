"""Writing a workflow: every step's job, the steps and the edges in one statement
(:data:`~jobq.store.sql.workflows.WORKFLOW_INSERT`), in the caller's transaction or in
one of its own committed before it returns."""

from __future__ import annotations

import dataclasses
from typing import Any

from psycopg.rows import dict_row

from jobq.errors import InvalidArgument
from jobq.job import Job
from jobq.jobs.copy_rows import array_literal
from jobq.store.connections import Connection, connection
from jobq.store.sql.workflows import WORKFLOW_GET_BY_KEY, WORKFLOW_INSERT
from jobq.workflows.runs import WorkflowRun, get_workflow

_JOB_FIELDS = tuple(field.name for field in dataclasses.fields(Job))


def submit(workflow: Any, *, conn: Connection | None = None, idempotency_key: str | None = None) -> WorkflowRun:
    """Enqueue ``workflow`` (a :class:`jobq.workflows.definition.Workflow`, which calls
    this from its ``enqueue``) and return its run (``run.id``, ``run.jobs`` by step name).
    Steps without parents are pending at once, the others ``waiting``. With an
    ``idempotency_key`` that an earlier workflow holds, returns that workflow's run and
    adds nothing. With ``conn``, the caller commits. Raises :class:`InvalidArgument`
    for an empty workflow or a bad key."""
    if not workflow.steps:
        raise InvalidArgument("steps", "a workflow needs at least one step")
    if idempotency_key is not None and not (isinstance(idempotency_key, str) and 1 <= len(idempotency_key) <= 255):
        raise InvalidArgument("idempotency_key", "must be a string of 1-255 characters")
    with connection(conn) as c:
        with c.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(WORKFLOW_INSERT, _params(workflow, idempotency_key)).fetchall()
        if not rows:  # the key is held: that workflow is the answer
            (held,) = c.execute(WORKFLOW_GET_BY_KEY, {"key": idempotency_key}).fetchone()  # type: ignore[misc]
            return dataclasses.replace(get_workflow(held, conn=c), created=False)
    jobs = {row["name"]: Job(**{f: row[f] for f in _JOB_FIELDS}) for row in rows}
    workflow_id = next(iter(jobs.values())).workflow_id
    return WorkflowRun(id=workflow_id, name=workflow.name, status="running", jobs=jobs)  # type: ignore[arg-type]


def _params(workflow: Any, idempotency_key: str | None) -> dict[str, Any]:
    steps = list(workflow.steps.values())
    edges = [(parent, s.name) for s in steps for parent in s.after]
    return {
        "name": workflow.name,
        "key": idempotency_key,
        "names": [s.name for s in steps],
        "types": [s.spec.type for s in steps],
        "queues": [s.spec.queue for s in steps],
        "payloads": [s.spec.payload_json() for s in steps],
        "priorities": [s.spec.priority for s in steps],
        "max_retries": [s.spec.max_retries for s in steps],
        "run_ats": [s.spec.run_at for s in steps],
        "tags": [None if s.spec.tags is None else array_literal(s.spec.tags) for s in steps],
        "parents_left": [len(s.after) for s in steps],
        "on_parent_failure": [s.on_parent_failure for s in steps],
        "concurrency_keys": [s.spec.concurrency_key for s in steps],
        "parents": [parent for parent, _ in edges],
        "children": [child for _, child in edges],
    }
