"""Stored schedules against a real PostgreSQL: declaring (jobq.schedules.stored.declare), firing
(jobq.daemon.maintenance.firing.fire_due, the leader's transaction), and the operator's functions."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import jobq
from jobq.daemon.maintenance import firing
from jobq.schedules import stored as schedules
from jobq.schedules.cron import Cron
from jobq.daemon import presence
from jobq.settings import DEFAULT_STALE_THRESHOLD
from support.claims import claim, complete
from support.schedules import declare, spec

pytestmark = [pytest.mark.db, pytest.mark.schedules]

UTC = timezone.utc
STALE = DEFAULT_STALE_THRESHOLD


@pytest.fixture
def sched(conn: psycopg.Connection) -> psycopg.Connection:
    """Empty schedules and audit trail, on top of the conn fixture's empty tables."""
    conn.execute("TRUNCATE jobq_schedules, jobq_audit")
    return conn


def db_now(conn: psycopg.Connection) -> datetime:
    return conn.execute("SELECT now()").fetchone()[0]


def far_from_now(conn: psycopg.Connection) -> str:
    """An hourly expression whose slots are at least 25 minutes from now: a test that
    seeds missed slots never meets one that happens to be on time."""
    return f"{(db_now(conn).minute + 30) % 60} * * * *"


def seed_missed(conn: psycopg.Connection, name: str, cron: str, missed: int) -> list[datetime]:
    """Set the schedule's next_run_at back so that ``missed`` slots have passed; return them."""
    now = db_now(conn)
    slots, _ = Cron(cron).due(now - timedelta(hours=missed + 1), now, missed)
    conn.execute("UPDATE jobq_schedules SET next_run_at = %s WHERE name = %s", (slots[0], name))
    return slots


def fire(conn: psycopg.Connection, catch_up_max: int = 100) -> firing.Fired:
    return firing.fire_due(conn, stale_seconds=STALE, catch_up_max=catch_up_max)


def jobs_of(conn: psycopg.Connection, name: str) -> list[tuple]:
    return conn.execute(
        "SELECT scheduled_for, idempotency_key, type, payload FROM jobs WHERE schedule = %s ORDER BY scheduled_for", (name,)
    ).fetchall()


# -- declaring ---------------------------------------------------------------------------


def test_a_declared_schedule_is_stored_with_its_first_slot_after_now(sched):
    assert declare(sched, spec()) == ["tick"]
    stored = schedules.get("tick", conn=sched)
    now = db_now(sched)
    assert stored.next_run_at == Cron("0 * * * *").next_after(now)
    assert (stored.cron, stored.type, stored.payload, stored.declared_by, stored.orphaned) == ("0 * * * *", "noop", {"n": 1}, 1, False)


def test_declaring_again_unchanged_changes_nothing_and_a_changed_definition_wins(sched):
    declare(sched, spec())
    sched.execute("UPDATE jobq_schedules SET next_run_at = next_run_at - interval '3 hours'")
    before = schedules.get("tick", conn=sched)
    assert declare(sched, spec(), worker="w2") == []
    assert schedules.get("tick", conn=sched).next_run_at == before.next_run_at
    # A payload change keeps the slot sequence; a cron change starts it again from now.
    assert declare(sched, spec(payload={"n": 2}), worker="w3") == ["tick"]
    changed = schedules.get("tick", conn=sched)
    assert (changed.payload, changed.next_run_at) == ({"n": 2}, before.next_run_at)
    declare(sched, spec(cron="30 * * * *"), worker="w3")
    assert schedules.get("tick", conn=sched).next_run_at == Cron("30 * * * *").next_after(db_now(sched))


def test_a_conflicting_definition_on_another_live_worker_is_logged(sched, caplog):
    declare(sched, spec(), worker="old")
    with caplog.at_level("WARNING", logger="jobq.schedules.stored"):
        declare(sched, spec(payload={"n": 2}), worker="new")
    assert "schedule.conflict name=tick" in caplog.text and "other_workers=1" in caplog.text
    assert schedules.get("tick", conn=sched).payload == {"n": 2}


def test_a_pause_survives_a_new_definition(sched):
    declare(sched, spec())
    schedules.pause("tick", reason="maintenance window", actor="tester", conn=sched)
    declare(sched, spec(cron="*/5 * * * *"), worker="w2")
    stored = schedules.get("tick", conn=sched)
    assert (stored.paused, stored.paused_by, stored.reason, stored.cron) == (True, "tester", "maintenance window", "*/5 * * * *")


# -- firing ------------------------------------------------------------------------------


@pytest.mark.parametrize("catch_up, fired", [("latest", [2]), ("all", [0, 1, 2]), ("skip", [])])
def test_missed_slots_are_fired_as_the_catch_up_policy_says(sched, catch_up, fired):
    cron = far_from_now(sched)
    declare(sched, spec(cron=cron, catch_up=catch_up))
    missed = seed_missed(sched, "tick", cron, 3)
    result = fire(sched)
    assert [row[0] for row in jobs_of(sched, "tick")] == [missed[i] for i in fired]
    assert result == firing.Fired(schedules=1, jobs=len(fired), overlap_skipped=0)
    stored = schedules.get("tick", conn=sched)
    assert stored.next_run_at == Cron(cron).next_after(db_now(sched))
    assert stored.last_run_at == (missed[fired[-1]] if fired else None)
    assert fire(sched) == firing.Fired()  # nothing due any more


def test_a_fired_job_carries_its_schedule_its_slot_and_a_key_per_slot(sched):
    cron = far_from_now(sched)
    declare(sched, spec(cron=cron, catch_up="all", type="echo", payload={"kind": "daily"}))
    missed = seed_missed(sched, "tick", cron, 2)
    fire(sched)
    key = "cron:tick:" + missed[0].strftime("%Y-%m-%dT%H:%M:%SZ")
    assert jobs_of(sched, "tick")[0] == (missed[0], key, "echo", {"kind": "daily"})
    job = jobq.get(schedules.get("tick", conn=sched).last_job_id, conn=sched)
    assert (job.schedule, job.scheduled_for, job.to_dict()["scheduled_for"]) == ("tick", missed[1], missed[1].isoformat())


def test_catch_up_all_keeps_the_latest_slots_up_to_the_cap_and_logs_it(sched, caplog):
    cron = far_from_now(sched)
    declare(sched, spec(cron=cron, catch_up="all"))
    missed = seed_missed(sched, "tick", cron, 5)
    with caplog.at_level("WARNING", logger="jobq.daemon.maintenance.firing"):
        fire(sched, catch_up_max=2)
    assert [row[0] for row in jobs_of(sched, "tick")] == missed[-2:]
    assert "schedule.catch_up_capped name=tick fired=2" in caplog.text


def test_catch_up_all_across_a_past_dst_change_fires_each_wall_clock_slot_once(sched):
    declare(sched, spec(cron="30 2 * * *", tz="Europe/Berlin", catch_up="all"))
    sched.execute("UPDATE jobq_schedules SET next_run_at = '2026-10-23 00:30Z'")  # 02:30 CEST
    fire(sched, catch_up_max=100_000)
    fired = [row[0] for row in jobs_of(sched, "tick")]
    berlin = [slot.astimezone(Cron("* * * * *", "Europe/Berlin").zone) for slot in fired]
    assert fired[:4] == [datetime(2026, 10, 23, 0, 30, tzinfo=UTC), datetime(2026, 10, 24, 0, 30, tzinfo=UTC),
                         datetime(2026, 10, 25, 0, 30, tzinfo=UTC), datetime(2026, 10, 26, 1, 30, tzinfo=UTC)]
    assert len({local.date() for local in berlin}) == len(fired)  # one a day, 25 October included
    assert {(local.hour, local.minute) for local in berlin} == {(2, 30)}


def test_two_leaders_at_once_make_one_job_per_slot(sched, database_url):
    cron = far_from_now(sched)
    declare(sched, spec(cron=cron, catch_up="all"))
    missed = seed_missed(sched, "tick", cron, 4)
    # Leader A fires in a transaction it has not committed; leader B fires meanwhile.
    with psycopg.connect(database_url) as a, psycopg.connect(database_url, autocommit=True) as b:
        a.execute("SELECT 1")  # an open transaction: fire_due's goes in a savepoint, its locks stay
        assert fire(a).jobs == 4
        assert a.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        results: list[firing.Fired] = []
        thread = threading.Thread(target=lambda: results.append(fire(b)))
        thread.start()
        thread.join(timeout=10)
        assert results == [firing.Fired()]  # A's rows were locked: skipped, not waited on
        a.commit()
        assert fire(b) == firing.Fired()  # and now they are advanced
        # A leader whose view is older (the row seeded back again) still adds nothing: the keys.
        seed_missed(b, "tick", cron, 4)
        barrier = threading.Barrier(2)

        def race(c: psycopg.Connection) -> None:
            barrier.wait()
            results.append(fire(c))

        threads = [threading.Thread(target=race, args=(c,)) for c in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
    assert [row[0] for row in jobs_of(sched, "tick")] == missed
    assert sum(r.jobs for r in results) == 0


def test_overlap_skip_fires_nothing_while_the_previous_job_is_unfinished(sched):
    cron = far_from_now(sched)
    declare(sched, spec(cron=cron, overlap="skip", catch_up="all"))
    seed_missed(sched, "tick", cron, 3)
    assert fire(sched) == firing.Fired(schedules=1, jobs=1, overlap_skipped=2)  # one at a time, the latest
    for status in ("pending", "claimed"):
        if status == "claimed":
            claimed = claim(sched)
        seed_missed(sched, "tick", cron, 1)
        assert fire(sched) == firing.Fired(schedules=1, jobs=0, overlap_skipped=1)
    complete(sched, claimed)
    # The slot's key, free again (the job's column, and the 'always' keys' table of schema
    # 13): only overlap could stop it.
    sched.execute("UPDATE jobs SET idempotency_key = NULL; DELETE FROM job_idempotency_keys")
    seed_missed(sched, "tick", cron, 1)
    assert fire(sched) == firing.Fired(schedules=1, jobs=1, overlap_skipped=0)
    skipped = sched.execute(
        "SELECT sum(n) FROM job_counters WHERE name = 'schedule_overlap_skipped_total' AND type = 'noop'"
    ).fetchone()[0]
    assert skipped == 4


def test_an_orphaned_or_paused_schedule_does_not_fire_and_resumes_by_its_policy(sched):
    cron = far_from_now(sched)
    declare(sched, spec(cron=cron, catch_up="latest"))
    missed = seed_missed(sched, "tick", cron, 2)
    sched.execute("UPDATE workers SET heartbeat_at = now() - interval '1 hour'")  # its worker is gone
    assert schedules.get("tick", conn=sched).orphaned
    assert fire(sched) == firing.Fired() and firing.seconds_until_due(sched, stale_seconds=STALE) is None
    declare(sched, spec(cron=cron, catch_up="latest"), worker="w2")  # a worker declares it again
    schedules.pause("tick", conn=sched)
    assert fire(sched) == firing.Fired() and firing.seconds_until_due(sched, stale_seconds=STALE) is None
    schedules.resume("tick", conn=sched)
    assert firing.seconds_until_due(sched, stale_seconds=STALE) < 0
    assert fire(sched).jobs == 1
    assert [row[0] for row in jobs_of(sched, "tick")] == missed[-1:]


def test_a_stored_expression_the_leader_cannot_read_waits_an_hour_instead_of_spinning(sched, caplog):
    declare(sched, spec())
    sched.execute("UPDATE jobq_schedules SET cron = '0 99 * * *', next_run_at = now() - interval '1 minute'")
    with caplog.at_level("ERROR", logger="jobq.daemon.maintenance.firing"):
        assert fire(sched) == firing.Fired()
    assert "schedule.unreadable name=tick" in caplog.text
    assert 3590 < firing.seconds_until_due(sched, stale_seconds=STALE) <= 3600
    assert jobs_of(sched, "tick") == []


# -- operating ---------------------------------------------------------------------------


def test_pause_resume_run_and_prune_are_audited(sched):
    declare(sched, spec("kept"), spec("gone"))
    presence.declare(sched, "w1", {"kept": spec("kept").definition_hash()})  # the worker no longer declares 'gone'
    schedules.pause("kept", reason="why not", actor="tester", conn=sched)
    schedules.resume("kept", actor="tester", conn=sched)
    job = schedules.run("kept", actor="tester", conn=sched)
    assert (job.schedule, job.scheduled_for, job.status, job.payload) == ("kept", None, "pending", {"n": 1})
    assert schedules.prune(actor="tester", conn=sched) == ["gone"]
    assert [s.name for s in schedules.list_schedules(conn=sched)] == ["kept"]
    detail = schedules.show("kept", conn=sched)
    assert [j.id for j in detail.jobs] == [job.id] and detail.schedule.last_job_status == "pending"
    audit = sched.execute("SELECT actor, action, target, counts FROM jobq_audit ORDER BY id").fetchall()
    assert [(a, act, t) for a, act, t, _ in audit] == [
        ("tester", "schedule.pause", {"schedule": "kept"}),
        ("tester", "schedule.resume", {"schedule": "kept"}),
        ("tester", "schedule.run", {"schedule": "kept"}),
        ("tester", "schedule.prune", {"schedules": ["gone"]}),
    ]
    assert audit[2][3] == {"changed": 1, "job": job.id}


@pytest.mark.parametrize("action", [schedules.pause, schedules.resume, schedules.run, schedules.show])
def test_an_unknown_schedule_is_not_found(sched, action):
    with pytest.raises(schedules.ScheduleNotFound, match="'nope'"):
        action("nope", conn=sched)


def test_the_command_line_operates_schedules_and_names_an_unknown_one(sched, database_url):
    from support.cli import run_cli

    declare(sched, spec("nightly"))
    assert "nightly" in run_cli("schedules", "list", DATABASE_URL=database_url).stdout
    paused = run_cli("schedules", "pause", "nightly", "--reason", "disk full", DATABASE_URL=database_url)
    assert (paused.returncode, paused.stdout.strip()) == (0, "jobq: schedule nightly paused")
    shown = run_cli("schedules", "show", "nightly", DATABASE_URL=database_url).stdout
    assert "state: paused" in shown and "disk full" in shown
    assert "resumed" in run_cli("schedules", "resume", "nightly", DATABASE_URL=database_url).stdout
    ran = run_cli("schedules", "run", "nightly", DATABASE_URL=database_url)
    assert ran.stdout.startswith("jobq: schedule nightly enqueued job ")
    assert "pruned 0" in run_cli("schedules", "prune", DATABASE_URL=database_url).stdout
    missing = run_cli("schedules", "pause", "weekly", DATABASE_URL=database_url)
    assert (missing.returncode, missing.stderr.strip()) == (1, "jobq: schedule 'weekly' not found")
    actors = {actor for (actor,) in sched.execute("SELECT actor FROM jobq_audit")}
    assert len(actors) == 1 and actors.pop().startswith("cli:")
