"""Firing periodic jobs: what the maintenance leader does when a schedule's slot comes.

:func:`fire_due` is one transaction: it locks the due schedules (``FOR UPDATE SKIP
LOCKED``), inserts one job per slot to fire with the idempotency key
``cron:<name>:<slot in UTC, ISO-8601>`` and the job's ``schedule`` and
``scheduled_for``, and advances ``next_run_at`` past the database's now (read in the
transaction: slots are reckoned by the database's clock, never the host's). Two
leaders that overlap during a failover make one job per slot: the row lock, and the
key under it.

Which slots fire: those from ``next_run_at`` to now. A slot less than ON_TIME_GRACE
old is on time and fires whatever the policy (the leader was only busy). Older ones
are missed (no daemon was running, an outage, a pause) and the schedule's
``catch_up`` decides: ``latest`` fires the latest missed slot when no slot is on time,
``all`` every one of them (the latest ``JOBQ_CATCH_UP_MAX``, logged when capped),
``skip`` none. With ``overlap="skip"``, nothing fires while the schedule has a job
pending, claimed or running, and one job at most otherwise (the latest slot): what is
skipped is logged and counted (``schedule_overlap_skipped_total``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from jobq.store.sql.schedules import (
    JOB_INSERT_SCHEDULED,
    SCHEDULE_ADVANCE_IF_NEXT_RUN_AT,
    SCHEDULE_LOCK_DUE,
    SCHEDULE_NEXT_DUE_IN,
)
from jobq.jobs import leases
from jobq.schedules.cron import Cron
from jobq.store.connections import Connection
from jobq.observe import tracing

log = logging.getLogger(__name__)

ON_TIME_GRACE = timedelta(seconds=10)
BATCH = 100  # schedules per transaction; the rest in the next one
UNREADABLE_RETRY = timedelta(hours=1)  # a stored expression this jobq cannot read waits this long
OVERLAP_COUNTER = "schedule_overlap_skipped_total"  # counted under the schedule's queue and type


@dataclass(frozen=True, slots=True)
class Fired:
    """What one call did: schedules advanced, jobs enqueued, slots skipped for overlap."""

    schedules: int = 0
    jobs: int = 0
    overlap_skipped: int = 0

    def __add__(self, other: Fired) -> Fired:
        return Fired(self.schedules + other.schedules, self.jobs + other.jobs, self.overlap_skipped + other.overlap_skipped)


def fire_due(conn: Connection, *, stale_seconds: float, catch_up_max: int) -> Fired:
    """Fire every due schedule, BATCH at a time, each batch in one transaction on
    ``conn`` (which must not be in one). ``stale_seconds``: a worker whose heartbeat is
    older does not count as declaring its schedules (JOBQ_STALE_THRESHOLD)."""
    total = Fired()
    while True:
        with conn.transaction():
            rows = conn.execute(SCHEDULE_LOCK_DUE, {"stale_seconds": stale_seconds, "limit": BATCH}).fetchall()
            for row in rows:
                total += _fire(conn, *row, catch_up_max=catch_up_max)
        if len(rows) < BATCH:
            return total


def seconds_until_due(conn: Connection, *, stale_seconds: float) -> float | None:
    """Seconds until the next slot of a schedule that would fire (0 or less: one is due);
    None when no schedule would."""
    row = conn.execute(SCHEDULE_NEXT_DUE_IN, {"stale_seconds": stale_seconds}).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def slots_to_fire(cron: Cron, next_run_at: datetime, now: datetime, catch_up: str, limit: int) -> tuple[list[datetime], int]:
    """The slots of one due schedule to fire now, oldest first, by its catch_up policy;
    and how many missed ones were left out for the cap (-1: more than the cap, not counted)."""
    on_time_from = max(next_run_at, now - ON_TIME_GRACE)
    on_time, _ = cron.due(on_time_from, now, limit)
    if catch_up == "skip" or on_time_from == next_run_at:
        return on_time, 0
    if catch_up == "latest":
        return on_time or cron.due(next_run_at, now, 1)[0], 0
    slots, capped = cron.due(next_run_at, now, limit)
    return slots, -1 if capped else 0


def idempotency_key(name: str, slot: datetime) -> str:
    """``cron:<name>:<slot in UTC, ISO-8601>``: one job per slot, whoever fires it."""
    return f"cron:{name}:{slot.astimezone(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _fire(
    conn: Connection, name: str, expression: str, tz: str, job_type: str, queue: str, catch_up: str, overlap: str,
    next_run_at: datetime, busy: bool, now: datetime, *, catch_up_max: int,
) -> Fired:
    try:
        cron = Cron(expression, tz)
    except (ValueError, KeyError) as exc:  # a row written by hand, or by a jobq with another croniter
        log.error("schedule.unreadable name=%s cron=%r tz=%s error=%s: looked at again in %s",
                  name, expression, tz, exc, UNREADABLE_RETRY)
        conn.execute(SCHEDULE_ADVANCE_IF_NEXT_RUN_AT, {
            "name": name, "was": next_run_at, "next_run_at": now + UNREADABLE_RETRY, "last_run_at": None,
            "last_job_id": None,
        })
        return Fired()
    slots, capped = slots_to_fire(cron, next_run_at, now, catch_up, catch_up_max)
    if capped:
        log.warning("schedule.catch_up_capped name=%s fired=%s: older missed slots were dropped (JOBQ_CATCH_UP_MAX)",
                    name, len(slots))
    skipped = 0
    if overlap == "skip" and slots:
        skipped = len(slots) if busy else len(slots) - 1
        slots = [] if busy else slots[-1:]
        if skipped:
            log.info("schedule.overlap_skipped name=%s slots=%s: its previous job has not finished", name, skipped)
            leases.count_events(conn, OVERLAP_COUNTER, [(queue, job_type)] * skipped)
    inserted = []
    if slots:
        with tracing.recorded_on(conn, queue, len(slots)):  # each firing a trace of its own
            inserted = conn.execute(
                JOB_INSERT_SCHEDULED,
                {"name": name, "slots": slots, "keys": [idempotency_key(name, slot) for slot in slots]},
            ).fetchall()
    following = cron.next_after(now)
    conn.execute(SCHEDULE_ADVANCE_IF_NEXT_RUN_AT, {
        "name": name, "was": next_run_at, "next_run_at": following,
        "last_run_at": slots[-1] if slots else None, "last_job_id": inserted[-1][0] if inserted else None,
    })
    for job_id, slot in inserted:
        log.info("schedule.fired name=%s id=%s type=%s slot=%s", name, job_id, job_type, slot.isoformat())
    return Fired(1, len(inserted), skipped)
