"""An operator's actions on a whole workflow: cancel every step not finished, and retry
its dead and cancelled steps (with their cancelled descendants), re-pointing the edges
at the new jobs. Each is recorded in the audit trail in the same transaction."""

from __future__ import annotations

from jobq.jobs import audit
from jobq.jobs.control import cancel_ids
from jobq.jobs.ledger import check_id
from jobq.store.connections import Connection, connection
from jobq.store.sql.workflows import (
    WORKFLOW_CANCEL_WAITING,
    WORKFLOW_GET,
    WORKFLOW_GET_JOB_IDS,
    WORKFLOW_RECOUNT_PARENTS,
    WORKFLOW_RELEASE,
    WORKFLOW_RETRY,
)
from jobq.errors import WorkflowNotFound
from jobq.workflows.runs import WorkflowRun, get_workflow


def cancel_workflow(workflow_id: int, *, actor: str | None = None, conn: Connection | None = None) -> WorkflowRun:
    """Cancel every step not finished yet: waiting ones first (so that none is released
    meanwhile), then pending, claimed and running ones (a running handler gets
    :class:`jobq.Cancelled`, as for :func:`jobq.cancel`). Returns the run. Raises
    :class:`WorkflowNotFound`."""
    check_id(workflow_id)
    actor = actor or audit.library_actor()
    with connection(conn) as c, c.transaction():
        _check_exists(c, workflow_id)
        waiting = c.execute(WORKFLOW_CANCEL_WAITING, {"id": workflow_id, "actor": actor}).fetchall()
        ids = [row[0] for row in c.execute(WORKFLOW_GET_JOB_IDS, {"id": workflow_id})]
        live = cancel_ids(c, ids, actor)
        audit.record(c, actor, "cancel_workflow", {"id": workflow_id}, {"changed": len(waiting) + len(live)})
        return get_workflow(workflow_id, conn=c)


def retry_workflow(workflow_id: int, *, actor: str | None = None, conn: Connection | None = None) -> WorkflowRun:
    """New jobs for the steps whose job ended dead or cancelled (the way :func:`jobq.retry`
    does for one job: the old rows stay, ``retried_as`` points at the new ones); the
    steps and edges are re-pointed at them, each new job waits for the parents retried
    with it and is pending at once if none. Returns the run (``run.jobs`` shows the new
    ids). Raises :class:`WorkflowNotFound`."""
    check_id(workflow_id)
    actor = actor or audit.library_actor()
    with connection(conn) as c, c.transaction():
        _check_exists(c, workflow_id)
        retried = c.execute(WORKFLOW_RETRY, {"id": workflow_id}).fetchall()
        if retried:
            names = [name for name, _, _ in retried]
            counts = c.execute(
                WORKFLOW_RECOUNT_PARENTS, {"id": workflow_id, "names": names, "new_ids": [new for _, _, new in retried]}
            ).fetchall()
            ready = [name for name, left in counts if left == 0 and name in names]
            c.execute(WORKFLOW_RELEASE, {"id": workflow_id, "names": ready})
        audit.record(c, actor, "retry_workflow", {"id": workflow_id},
                     {"changed": len(retried), "retried_as": {str(old): new for _, old, new in retried}})
        return get_workflow(workflow_id, conn=c)


def _check_exists(conn: Connection, workflow_id: int) -> None:
    if conn.execute(WORKFLOW_GET, {"id": workflow_id}).fetchone() is None:
        raise WorkflowNotFound(workflow_id)
