"""``/schedules``: periodic schedules; read them, pause, resume, run one now. The
actions take no body and are recorded in the audit trail under the request's actor."""

from __future__ import annotations

from jobq.schedules import stored
from web.auth import request_actor
from web.blueprints import resource
from web.context import api
from web.schemas import Error, JobOut
from web.schemas_schedules import PauseQuery, ScheduleDetailOut, ScheduleList, ScheduleOut, SchedulePath

schedules = resource("schedules", __name__, "Periodic schedules: declared in code, paused and resumed by operators")

NOT_FOUND = {400: Error, 404: Error}


@schedules.get("/schedules", responses={200: ScheduleList})
def list_schedules() -> dict:
    """Every schedule, by name: orphaned ones (no live worker declares them) do not fire."""
    with api().database.connection() as conn:
        return {"items": [s.to_dict() for s in stored.list_schedules(conn=conn)]}


@schedules.get("/schedules/<name>", responses={200: ScheduleDetailOut, **NOT_FOUND})
def get_schedule(path: SchedulePath) -> dict:
    """One schedule, with its latest 20 jobs."""
    with api().database.connection() as conn:
        return stored.show(path.name, conn=conn).to_dict()


@schedules.post("/schedules/<name>/pause", responses={200: ScheduleOut, **NOT_FOUND})
def pause(path: SchedulePath, query: PauseQuery) -> dict:
    """Stop the schedule firing until resumed (a pause survives deploys)."""
    with api().database.connection() as conn:
        return stored.pause(path.name, reason=query.reason, actor=request_actor(conn), conn=conn).to_dict()


@schedules.post("/schedules/<name>/resume", responses={200: ScheduleOut, **NOT_FOUND})
def resume(path: SchedulePath) -> dict:
    """Let the schedule fire again; its missed slots follow its catch_up policy at once."""
    with api().database.connection() as conn:
        return stored.resume(path.name, actor=request_actor(conn), conn=conn).to_dict()


@schedules.post("/schedules/<name>/run", responses={201: JobOut, **NOT_FOUND})
def run(path: SchedulePath) -> tuple[dict, int]:
    """Enqueue one job of the schedule now, outside its slots (201 with the job)."""
    with api().database.connection() as conn:
        return stored.run(path.name, actor=request_actor(conn), conn=conn).to_dict(), 201
