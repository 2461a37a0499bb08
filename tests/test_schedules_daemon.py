"""Periodic jobs fired by the real daemon: `jobq worker` processes whose handler
module (support.schedules) declares the schedules each test gives it."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from support.db import scalar
from support.schedules import VARIABLE, entry, parse
from support.waiting import wait_for

from jobq.daemon.maintenance import firing
from jobq.schedules import stored as schedules
from jobq.schedules.cron import Cron
from jobq.settings import DEFAULT_STALE_THRESHOLD

pytestmark = [pytest.mark.daemon, pytest.mark.schedules]

HANDLERS = "support.handlers,support.schedules"


@pytest.fixture
def sched(conn: psycopg.Connection) -> psycopg.Connection:
    conn.execute("TRUNCATE jobq_schedules, jobq_audit")
    return conn


def start(daemon, *entries: str, concurrency: int = 1, **env: str):
    return daemon(concurrency, JOBQ_HANDLERS=HANDLERS, **{VARIABLE: ";".join(entries)}, **env)


def pre_declare(conn: psycopg.Connection, *entries: str) -> None:
    """Store schedules as an earlier deploy left them (declared by a worker now gone)."""
    declared = {s.name: s for s in parse(";".join(entries))}
    schedules.declare(conn, "gone:1:x", declared, stale_seconds=DEFAULT_STALE_THRESHOLD)


def seed_missed(conn: psycopg.Connection, name: str, cron: str, missed: int) -> list:
    now = conn.execute("SELECT now()").fetchone()[0]
    slots, _ = Cron(cron).due(now - timedelta(hours=missed + 1), now, missed)
    conn.execute("UPDATE jobq_schedules SET next_run_at = %s WHERE name = %s", (slots[0], name))
    return slots


def far_from_now(conn: psycopg.Connection) -> str:
    minute = conn.execute("SELECT extract(minute FROM now())::int").fetchone()[0]
    return f"{(minute + 30) % 60} * * * *"


def slots_of(conn: psycopg.Connection, name: str) -> list:
    return [row[0] for row in conn.execute(
        "SELECT scheduled_for FROM jobs WHERE schedule = %s ORDER BY scheduled_for", (name,)
    )]


def advanced(conn: psycopg.Connection, name: str) -> bool:
    return bool(scalar(conn, "SELECT next_run_at > now() FROM jobq_schedules WHERE name = %s", name))


def test_a_seconds_schedule_fires_once_per_slot_within_a_second_with_two_supervisors(sched, daemon):
    every_second = entry("every_second", "* * * * * *", catch_up="all")
    start(daemon, every_second)
    start(daemon, every_second)
    wait_for(lambda: len(slots_of(sched, "every_second")) >= 11, 30, "11 slots fired")
    slots = slots_of(sched, "every_second")[:11]
    assert [(b - a).total_seconds() for a, b in zip(slots, slots[1:])] == [1.0] * 10  # no slot missed, none twice
    lateness = [float(x) for (x,) in sched.execute(
        "SELECT extract(epoch FROM created_at - scheduled_for) FROM jobs WHERE schedule = 'every_second' "
        "ORDER BY scheduled_for LIMIT 11"
    )]
    # Each slot fired within a second of its time once the schedule was running; the first
    # may be one that came while the two supervisors started (catch_up="all" fires it then:
    # 1.007 s late once in a whole suite on a busy machine).
    assert 0 <= lateness[0] < 2.0 and all(0 <= late < 1.0 for late in lateness[1:]), lateness
    assert scalar(sched, "SELECT count(DISTINCT idempotency_key) FROM jobs WHERE schedule = 'every_second'") == len(
        slots_of(sched, "every_second")
    )


def test_missed_slots_after_an_outage_are_fired_as_each_catch_up_policy_says(sched, daemon):
    cron = far_from_now(sched)
    entries = [entry(f"up_{policy}", cron, catch_up=policy) for policy in ("latest", "all", "skip")]
    pre_declare(sched, *entries)
    missed = {policy: seed_missed(sched, f"up_{policy}", cron, 3) for policy in ("latest", "all", "skip")}
    start(daemon, *entries)
    wait_for(lambda: all(advanced(sched, f"up_{p}") for p in ("latest", "all", "skip")), 20, "every schedule advanced")
    assert slots_of(sched, "up_latest") == missed["latest"][-1:]
    assert slots_of(sched, "up_all") == missed["all"]
    assert slots_of(sched, "up_skip") == []


def test_catch_up_all_across_a_past_dst_change_fires_each_wall_clock_slot_once_from_the_daemon(sched, daemon):
    nightly = entry("nightly", "30 2 * * *", catch_up="all", tz="Europe/Berlin")
    pre_declare(sched, nightly)
    # Due since 23 October 2026, 02:30 CEST: 25 October (fall back, 02:30 twice) is in the outage.
    sched.execute("UPDATE jobq_schedules SET next_run_at = '2026-10-23 00:30Z' WHERE name = 'nightly'")
    start(daemon, nightly, JOBQ_CATCH_UP_MAX="100000")  # every slot since, however long ago that is
    wait_for(lambda: advanced(sched, "nightly"), 20, "the schedule advanced past now")
    fired = slots_of(sched, "nightly")
    berlin = Cron("30 2 * * *", "Europe/Berlin").zone
    local = [slot.astimezone(berlin) for slot in fired]
    assert [slot.isoformat() for slot in fired[:4]] == [
        "2026-10-23T00:30:00+00:00", "2026-10-24T00:30:00+00:00", "2026-10-25T00:30:00+00:00", "2026-10-26T01:30:00+00:00"]
    assert {(t.hour, t.minute) for t in local} == {(2, 30)}
    days = [t.date() for t in local]
    assert all((b - a).days == 1 for a, b in zip(days, days[1:]))  # one a day: none skipped, none twice
    assert local[-1] <= sched.execute("SELECT now()").fetchone()[0] < local[-1] + timedelta(days=1)


def test_a_pause_survives_a_deploy_an_orphan_never_fires_and_a_resume_wakes_the_leader(sched, daemon):
    cron = far_from_now(sched)
    beacon = entry("beacon", cron)
    pre_declare(sched, entry("paused", cron, payload={"release": 1}), entry("orphan", cron), beacon)
    schedules.pause("paused", reason="until the fix ships", actor="tester", conn=sched)
    for name in ("paused", "orphan", "beacon"):
        seed_missed(sched, name, cron, 1)
    # The new release declares 'paused' with a new payload, and no longer declares 'orphan'.
    start(daemon, entry("paused", cron, payload={"release": 2}), beacon)
    wait_for(lambda: slots_of(sched, "beacon"), 20, "the leader firing the missed slot of a live schedule")
    # The leader may fire before a worker has booted and declared the new release.
    wait_for(lambda: schedules.get("paused", conn=sched).payload == {"release": 2}, 20, "the new release declared")
    stored = schedules.get("paused", conn=sched)
    assert (stored.paused, stored.paused_by, stored.reason, stored.payload) == (True, "tester", "until the fix ships", {"release": 2})
    assert schedules.get("orphan", conn=sched).orphaned
    assert slots_of(sched, "paused") == [] and slots_of(sched, "orphan") == []
    # Nothing else is due for half an hour: the leader sleeps (up to 5 s) until the resume wakes it.
    resumed_at = sched.execute("SELECT now()").fetchone()[0]
    schedules.resume("paused", actor="tester", conn=sched)
    wait_for(lambda: slots_of(sched, "paused"), 3, "the resumed schedule's missed slot")
    created = scalar(sched, "SELECT created_at FROM jobs WHERE schedule = 'paused'")
    assert (created - resumed_at).total_seconds() < 0.5
    assert slots_of(sched, "orphan") == []


def test_overlap_skip_never_runs_two_jobs_of_a_schedule_at_once(sched, daemon):
    start(daemon, entry("long", "* * * * * *", type="slow", overlap="skip", payload={"sleep_seconds": 1.6}),
          concurrency=3)
    wait_for(lambda: scalar(sched, "SELECT count(*) FROM jobs WHERE schedule = 'long' AND status = 'done'") >= 2,
             20, "two runs done")
    runs = sched.execute(
        "SELECT started_at, completed_at FROM jobs WHERE schedule = 'long' AND status = 'done' ORDER BY started_at"
    ).fetchall()
    assert all(later[0] >= earlier[1] for earlier, later in zip(runs, runs[1:])), runs
    skipped = scalar(sched, "SELECT sum(n) FROM job_counters WHERE name = %s AND type = 'slow'",
                     firing.OVERLAP_COUNTER)
    assert skipped and skipped >= 1
    fired = slots_of(sched, "long")
    assert any((b - a).total_seconds() > 1 for a, b in zip(fired, fired[1:]))  # slots were skipped, not queued


def test_a_worker_whose_row_was_removed_declares_its_schedules_again(sched, daemon):
    start(daemon, entry("hourly", far_from_now(sched)))
    declared = "SELECT count(*) FROM workers WHERE schedules ? 'hourly'"
    wait_for(lambda: scalar(sched, declared) == 1, 20, "the worker declaring")
    sched.execute("DELETE FROM workers")  # as the leader does to a worker it took for stale
    wait_for(lambda: scalar(sched, declared) == 1, 5, "the heartbeat registering and declaring again")
    assert not schedules.get("hourly", conn=sched).orphaned
