"""``/dashboard/schedules``: every periodic schedule: cron, zone, next and last run, its
last job, paused or orphaned; run now, pause, resume (:mod:`jobq.schedules`)."""

from __future__ import annotations

from flask import Response, redirect, request, url_for

from jobq import schedules as library
from web.dashboard import common, security
from web.dashboard.blueprints import actions, pages


@pages.get("/schedules")
def schedules() -> str:
    with common.database() as conn:
        listed = library.list_schedules(conn=conn)
    return common.page("schedules.html", "Schedules", schedules=listed)


@actions.post("/schedules/<name>/<any(run, pause, resume):action>")
def schedule_change(name: str, action: str) -> Response:
    actor = security.actor()
    with common.database() as conn:
        if action == "run":
            job = library.run(name, actor=actor, conn=conn)
            return redirect(url_for("dashboard.job", job_id=job.id))
        if action == "pause":
            library.pause(name, reason=request.form.get("reason") or None, actor=actor, conn=conn)
        else:
            library.resume(name, actor=actor, conn=conn)
    return redirect(url_for("dashboard.schedules"))
