"""``/dashboard/audit``: the audit trail, newest first, a page at a time (who did what:
cancels, retries, bulk operations, pauses, from the API, the CLI and this dashboard)."""

from __future__ import annotations

from flask import request

from jobq.jobs import audit as trail
from web.dashboard import common
from web.dashboard.blueprints import pages

PAGE = 50


@pages.get("/audit")
def audit() -> str:
    before = request.args.get("before", type=int)
    with common.database() as conn:
        entries = trail.entries(limit=PAGE + 1, before=before, conn=conn)
    older = entries[PAGE - 1].id if len(entries) > PAGE else None
    return common.page("audit.html", "Audit trail", entries=entries[:PAGE], older=older, before=before)
