"""``/audit``: the trail of operator actions, newest first."""

from __future__ import annotations

from jobq.jobs import audit as trail
from web.blueprints import resource
from web.context import api
from web.schemas import AuditPage, AuditQuery, Error

audit = resource("audit", __name__, "Who did what to the queue, and when")


@audit.get("/audit", responses={200: AuditPage, 400: Error})
def list_audit(query: AuditQuery) -> dict:
    """Operator actions (cancel, retry, run now, delete, bulk operations, pauses, ...),
    newest first; ``next_before`` gives the next page."""
    with api().database.connection() as conn:
        entries = trail.entries(limit=query.limit, before=query.before, conn=conn)
    next_before = entries[-1].id if len(entries) == query.limit else None
    return {"items": [entry.to_dict() for entry in entries], "next_before": next_before}
