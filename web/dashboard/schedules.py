"""``/dashboard/schedules``: every periodic schedule: cron, zone, next and last run, its
last job, paused or orphaned; run now, pause, resume (:mod:`jobq.schedules.stored`)."""

from __future__ import annotations

from flask import Response, redirect, url_for

from jobq.schedules import stored as library
from jobq.schedules.declarations import NAME
from web.dashboard import common, security
from web.dashboard.blueprints import actions, pages


@pages.get("/schedules")
def schedules() -> str:
    with common.database() as conn:
        listed = library.list_schedules(conn=conn)
    return common.page("schedules.html", "Schedules", schedules=listed)


@actions.post("/schedules/<name>/run")
def schedule_run(name: str) -> Response:
    """One job of the schedule now, outside its slots; its page."""
    _check(name)
    with common.database() as conn:
        job = library.run(name, actor=security.actor(), conn=conn)
    return redirect(url_for("dashboard.job", job_id=job.id))


@actions.post("/schedules/<name>/<any(pause, resume):action>")
def schedule_change(name: str, action: str) -> Response:
    _check(name)
    common.pause_or_resume(library, name, action)
    return redirect(url_for("dashboard.schedules"))


def _check(name: str) -> None:
    """A name no schedule can have (jobq.periodic's names) is not found, not sent."""
    if not NAME.fullmatch(name):
        raise library.ScheduleNotFound(name)
