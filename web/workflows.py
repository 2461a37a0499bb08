"""``/workflows``: submit a workflow (its steps and edges, in one transaction), read one
with its steps and edges, list them, cancel and retry one (audited under the request's
actor)."""

from __future__ import annotations

from flask import Response

import jobq
from jobq.errors import InvalidArgument
from jobq.workflows.definition import from_steps
from web import jsonio
from web.auth import request_actor
from web.blueprints import resource
from web.context import api
from web.errors import error_response
from web.schemas import Error, ValidationFailure
from web.schemas_workflows import WorkflowBody, WorkflowListQuery, WorkflowOut, WorkflowPage, WorkflowPath

workflows = resource("workflows", __name__, "Workflows: jobs with edges")
workflow_actions = resource("workflow_actions", __name__, "Acting on one workflow: cancel, retry")
workflows.before_request(jsonio.require_json_body)

NOT_FOUND = {400: Error, 404: Error}


@workflows.post("/workflows", responses={201: WorkflowOut, 200: WorkflowOut, 400: Error, 413: Error, 415: Error,
                                         422: ValidationFailure})
def create_workflow(body: WorkflowBody) -> tuple[dict, int] | Response:
    """Enqueue a workflow: 201 with its id and each step's job id. 422 naming the step
    for a cycle, an unknown or duplicate name, an unknown option, or more than 10,000
    steps. With an idempotency_key held by an earlier workflow: 200 with that one."""
    steps = [step.model_dump(exclude_unset=True) | (step.model_extra or {}) for step in body.steps]
    try:
        workflow = from_steps(body.name, steps)
    except InvalidArgument as exc:
        return error_response(422, [{"loc": ["body", exc.field], "msg": exc.message, "type": "value_error"}])
    with api().database.connection() as conn:
        run = workflow.enqueue(conn=conn, idempotency_key=body.idempotency_key)
        return jobq.get_workflow(run.id, conn=conn).to_dict(), 201 if run.created else 200


@workflows.get("/workflows/<int:workflow_id>", responses={200: WorkflowOut, **NOT_FOUND})
def get_workflow(path: WorkflowPath) -> dict:
    """A workflow: its status, its steps (each with its current job and status) and edges."""
    with api().database.connection() as conn:
        return jobq.get_workflow(path.workflow_id, conn=conn).to_dict()


@workflows.get("/workflows", responses={200: WorkflowPage, 400: Error})
def list_workflows(query: WorkflowListQuery) -> dict:
    """Workflows newest first, optionally of one status, a keyset page at a time."""
    with api().database.connection() as conn:
        listed = jobq.list_workflows(**query.model_dump(), conn=conn)
    full = len(listed) == query.limit
    return {"workflows": listed, "next_before": listed[-1]["id"] if full else None}


@workflow_actions.post("/workflows/<int:workflow_id>/cancel", responses={200: WorkflowOut, **NOT_FOUND})
def cancel_workflow(path: WorkflowPath) -> dict:
    """Cancel every step not finished (running ones get jobq.Cancelled, as for one job)."""
    with api().database.connection() as conn:
        return jobq.cancel_workflow(path.workflow_id, actor=request_actor(conn), conn=conn).to_dict()


@workflow_actions.post("/workflows/<int:workflow_id>/retry", responses={200: WorkflowOut, **NOT_FOUND})
def retry_workflow(path: WorkflowPath) -> dict:
    """New jobs for the dead and cancelled steps (the old ones point at them: retried_as),
    with the edges re-pointed; the answer shows the new job ids."""
    with api().database.connection() as conn:
        return jobq.retry_workflow(path.workflow_id, actor=request_actor(conn), conn=conn).to_dict()

