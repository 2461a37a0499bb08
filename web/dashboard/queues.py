"""``/dashboard/queues``: each queue's depth, the workers serving it, its limits (slots
in use, jobs held), its pause (by whom, since when, why); pause and resume
(:mod:`jobq.jobs.queues`). ``/dashboard/limits``: every rule on keys and every limited
queue, with their use (:mod:`jobq.limits`)."""

from __future__ import annotations

from flask import Response, redirect, request, url_for

from jobq.jobs import queues as library
from jobq.jobs.ledger import COUNT_LIMIT
from jobq.limits import list_limits, queue_limits
from jobq.observe import tallies
from web.dashboard import common
from web.dashboard.blueprints import actions, pages


@pages.get("/queues")
def queues() -> str:
    with common.database() as conn:
        listed = library.list_queues(stale_seconds=common.stale_seconds(), conn=conn)
        scheduled = tallies.scheduled([q.name for q in listed if q.depth["pending"]], conn=conn)
        limited = {limits.queue: limits for limits in queue_limits(conn=conn)}
    return common.page("queues.html", "Queues", queues=listed, scheduled=scheduled, cap=COUNT_LIMIT, limits=limited)


@pages.get("/limits")
def limits() -> str:
    with common.database() as conn:
        rules, limited = list_limits(conn=conn), queue_limits(conn=conn)
    return common.page("limits.html", "Limits", rules=rules, queues=limited)


@actions.post("/queues/<path:name>/<any(pause, resume):action>")
def queue_change(name: str, action: str) -> Response:
    """Pause (with the form's reason, if any) or resume; back to the page it came from."""
    common.pause_or_resume(library, name, action)
    return redirect(_back())


def _back() -> str:
    target = request.form.get("back", "")
    return target if target.startswith("/dashboard") and not target.startswith("//") else url_for("dashboard.queues")
