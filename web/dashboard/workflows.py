"""``/dashboard/workflows`` (the list, by status, a keyset page at a time) and
``/dashboard/workflows/<id>`` (its graph, its steps, cancel and retry)."""

from __future__ import annotations

from flask import Response, redirect, request, url_for

import jobq
from web.dashboard import common, graph, security
from web.dashboard.blueprints import actions, pages


@pages.get("/workflows")
def workflows() -> str:
    status = request.args.get("status") or None
    before = request.args.get("before", type=int)
    with common.database() as conn:
        listed = jobq.list_workflows(status=status, before=before, limit=common.PAGE_SIZE, conn=conn)
    next_before = listed[-1]["id"] if len(listed) == common.PAGE_SIZE else None
    return common.page("workflows.html", "Workflows", workflows=listed, status=status, next_before=next_before)


@pages.get("/workflows/<int:workflow_id>")
def workflow(workflow_id: int) -> str:
    with common.database() as conn:
        run = jobq.get_workflow(workflow_id, conn=conn)
    parents: dict[str, list[str]] = {}
    for parent, child, _ in run.edges:
        parents.setdefault(child, []).append(parent)
    drawn = graph.svg(run, lambda job_id: url_for("dashboard.job", job_id=job_id))
    return common.page("workflow.html", f"Workflow {workflow_id}", run=run, graph=drawn, parents=parents,
                       max_drawn=graph.MAX_DRAWN)


WORKFLOW_ACTIONS = {"cancel": jobq.cancel_workflow, "retry": jobq.retry_workflow}


@actions.post("/workflows/<int:workflow_id>/<any(cancel, retry):action>")
def workflow_act(workflow_id: int, action: str) -> Response:
    act_on = WORKFLOW_ACTIONS[action]
    with common.database() as conn:
        act_on(workflow_id, actor=security.actor(), conn=conn)
    return redirect(url_for("dashboard.workflow", workflow_id=workflow_id))
