"""Stored schedules (``jobq_schedules``): what workers declare at boot, and what
operators do with them.

The code is the source of truth for what a schedule is: :func:`declare`, called by
each worker at boot, upserts its modules' declarations (:mod:`jobq.schedules.declarations`) and
records them on the worker's row; the newest changed definition wins. The operator
decides whether it runs: :func:`pause` and :func:`resume` (a pause survives every
deploy), :func:`run` (one extra job now), :func:`prune` (delete the orphans, which no
live worker declares and which do not fire). Each operator action writes an audit row
in its transaction. The maintenance leader fires them (:mod:`jobq.daemon.maintenance.firing`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from psycopg import Cursor
from psycopg.rows import class_row

from jobq import settings
from jobq.store.sql.database import DATABASE_NOW
from jobq.store.sql.schedules import (
    CONTROL_NOTIFY_SCHEDULES,
    JOB_INSERT_SCHEDULE_RUN,
    JOB_LIST_OF_SCHEDULE,
    SCHEDULE_DELETE_ORPHANS,
    SCHEDULE_GET,
    SCHEDULE_LIST,
    SCHEDULE_PAUSE,
    SCHEDULE_RESUME,
    SCHEDULE_UPSERT_IF_CHANGED,
)
from jobq.store.sql.workers import WORKER_LIST_SCHEDULE_CONFLICTS
from jobq.jobs import audit
from jobq.store.connections import Connection, connection
from jobq.schedules.declarations import Periodic
from jobq.errors import NotFound
from jobq.job import Job, _Row

log = logging.getLogger(__name__)

RECENT_JOBS = 20  # what show() and GET /schedules/{name} list of a schedule's jobs


class ScheduleNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"schedule {name!r} not found")
        self.name = name


@dataclasses.dataclass(frozen=True, slots=True)
class Schedule(Periodic, _Row):
    """A snapshot of one row of ``jobq_schedules``: the declaration's fields
    (:class:`~jobq.schedules.declarations.Periodic`), then what the database keeps of
    it, with how many live workers declare it (``declared_by``; 0: orphaned, it does not
    fire) and its last job's status."""

    hash: str
    paused_at: datetime | None
    paused_by: str | None
    reason: str | None
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: int | None
    created_at: datetime
    updated_at: datetime
    declared_by: int
    last_job_status: str | None
    last_run_age_seconds: float | None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def orphaned(self) -> bool:
        return self.declared_by == 0

    def to_dict(self) -> dict[str, Any]:
        # _Row.to_dict, not super(): slots=True makes a new class that super()'s cell does not know
        return {**_Row.to_dict(self), "paused": self.paused, "orphaned": self.orphaned}


@dataclasses.dataclass(frozen=True, slots=True)
class Detail:
    """One schedule and its latest jobs, newest first."""

    schedule: Schedule
    jobs: list[Job]

    def to_dict(self) -> dict[str, Any]:
        return {**self.schedule.to_dict(), "jobs": [job.to_dict() for job in self.jobs]}


# -- what workers declare ----------------------------------------------------------------


def declare(
    conn: Connection, worker_id: str, schedules: Mapping[str, Periodic], *, stale_seconds: float
) -> list[str]:
    """Upsert the schedules a worker declares (``worker_id``, whose row already records
    them), in one transaction on ``conn`` (which must not be in one). A new schedule's
    first slot is the first after the database's now. Logs each schedule created or
    changed, and each that another live worker declares differently (a rolling deploy:
    this, the newest, definition fires); wakes the maintenance leader when something
    changed. Returns the names created or changed."""
    if not schedules:
        return []
    hashes = {name: schedule.definition_hash() for name, schedule in schedules.items()}
    rows = [schedules[name] for name in sorted(schedules)]
    with conn.transaction():
        (now,) = conn.execute(DATABASE_NOW).fetchone()  # type: ignore[misc]
        changed = [name for (name,) in conn.execute(SCHEDULE_UPSERT_IF_CHANGED, {
            "names": [s.name for s in rows],
            "crons": [s.cron for s in rows],
            "tzs": [s.tz for s in rows],
            "types": [s.type for s in rows],
            "queues": [s.queue for s in rows],
            "payloads": [json.dumps(s.payload) for s in rows],
            "priorities": [s.priority for s in rows],
            "max_retries": [s.max_retries for s in rows],
            "catch_ups": [s.catch_up for s in rows],
            "overlaps": [s.overlap for s in rows],
            "hashes": [hashes[s.name] for s in rows],
            "next_run_ats": [s.slots.next_after(now) for s in rows],
        })]
        if changed:
            conn.execute(CONTROL_NOTIFY_SCHEDULES)
        conflicts = conn.execute(WORKER_LIST_SCHEDULE_CONFLICTS, {
            "id": worker_id, "schedules": json.dumps(hashes), "stale_seconds": stale_seconds,
        }).fetchall()
    for name in changed:
        log.info("schedule.declared name=%s hash=%s worker=%s", name, hashes[name], worker_id)
    for name, workers in conflicts:
        log.warning(
            "schedule.conflict name=%s hash=%s worker=%s other_workers=%s: live workers declare other definitions; "
            "the newest changed one fires", name, hashes[name], worker_id, workers,
        )
    return changed


# -- what operators see and do -----------------------------------------------------------


def list_schedules(*, conn: Connection | None = None) -> list[Schedule]:
    """Every stored schedule, by name."""
    with connection(conn) as c:
        return cursor_of_all(c, stale_seconds=_stale_seconds()).fetchall()


def cursor_of_all(conn: Connection, *, stale_seconds: float) -> Cursor[Schedule]:
    """Every stored schedule, by name, as a cursor to fetch from (in a pipeline, later)."""
    return conn.cursor(row_factory=class_row(Schedule)).execute(SCHEDULE_LIST, {"stale_seconds": stale_seconds})


# What /metrics shows of each schedule.
SUMMARY = ("next_run_at", "last_run_at", "last_run_age_seconds", "last_job_status", "paused", "orphaned")


def summary(rows: list[Schedule]) -> dict[str, Any]:
    """What /metrics shows of the schedules: how many, paused, orphaned, and per name its
    next and last run (ISO-8601, UTC), the age of the last run and its last job's status."""
    return {
        "count": len(rows),
        "paused": sum(1 for s in rows if s.paused),
        "orphaned": sum(1 for s in rows if s.orphaned),
        "items": {s.name: {key: value for key, value in s.to_dict().items() if key in SUMMARY} for s in rows},
    }


def get(name: str, *, conn: Connection | None = None) -> Schedule:
    """One schedule. Raises :class:`ScheduleNotFound`."""
    with connection(conn) as c:
        cur = c.cursor(row_factory=class_row(Schedule))
        found = cur.execute(SCHEDULE_GET, {"stale_seconds": _stale_seconds(), "name": name}).fetchone()
    if found is None:
        raise ScheduleNotFound(name)
    return found


def show(name: str, *, conn: Connection | None = None) -> Detail:
    """One schedule and its latest RECENT_JOBS jobs. Raises :class:`ScheduleNotFound`."""
    with connection(conn) as c:
        schedule = get(name, conn=c)
        jobs = c.cursor(row_factory=class_row(Job)).execute(
            JOB_LIST_OF_SCHEDULE, {"name": name, "limit": RECENT_JOBS}
        ).fetchall()
    return Detail(schedule, jobs)


def pause(name: str, *, reason: str | None = None, actor: str | None = None, conn: Connection | None = None) -> Schedule:
    """Pause a schedule: it fires nothing until resumed, whatever workers declare; its
    missed slots are then handled by its catch_up policy. Commits on its own connection;
    on ``conn``, the caller commits. Raises :class:`ScheduleNotFound`."""
    actor = actor or audit.library_actor()
    with connection(conn) as c:
        if c.execute(SCHEDULE_PAUSE, {"name": name, "actor": actor, "reason": reason}).fetchone() is None:
            raise ScheduleNotFound(name)
        audit.record(c, actor, "schedule.pause", {"schedule": name}, {"changed": 1, "reason": reason})
        return get(name, conn=c)


def resume(name: str, *, actor: str | None = None, conn: Connection | None = None) -> Schedule:
    """Resume a schedule, and wake the maintenance leader: missed slots are fired by the
    catch_up policy at once. Raises :class:`ScheduleNotFound`."""
    actor = actor or audit.library_actor()
    with connection(conn) as c:
        row = c.execute(SCHEDULE_RESUME, {"name": name}).fetchone()
        if row is None:
            raise ScheduleNotFound(name)
        c.execute(CONTROL_NOTIFY_SCHEDULES)
        audit.record(c, actor, "schedule.resume", {"schedule": name}, {"changed": int(bool(row[0]))})
        return get(name, conn=c)


def run(name: str, *, actor: str | None = None, conn: Connection | None = None) -> Job:
    """Enqueue one job of the schedule now, outside its slots (``scheduled_for`` None),
    paused or not; returns it. Raises :class:`ScheduleNotFound`."""
    actor = actor or audit.library_actor()
    with connection(conn) as c:
        job = c.cursor(row_factory=class_row(Job)).execute(JOB_INSERT_SCHEDULE_RUN, {"name": name}).fetchone()
        if job is None:
            raise ScheduleNotFound(name)
        audit.record(c, actor, "schedule.run", {"schedule": name}, {"changed": 1, "job": job.id})
        return job


def prune(*, actor: str | None = None, conn: Connection | None = None) -> list[str]:
    """Delete the orphaned schedules (no live worker declares them); returns their names."""
    actor = actor or audit.library_actor()
    with connection(conn) as c:
        names = [name for (name,) in c.execute(SCHEDULE_DELETE_ORPHANS, {"stale_seconds": _stale_seconds()})]
        audit.record(c, actor, "schedule.prune", {"schedules": names}, {"changed": len(names)})
        return names


def _stale_seconds() -> float:
    """A worker is live while its heartbeat is younger than this (JOBQ_STALE_THRESHOLD)."""
    return settings.current().stale_threshold
