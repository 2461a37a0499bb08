"""Bulk operations (jobq.jobs.operations): in chunks, each its own transaction; rows another
session holds or not eligible are skipped and counted; dry runs change nothing; an
operation whose runner died is carried to the end by resume_stalled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from support.rows import audit_actions, seed, seed_dead, statuses
from support.waiting import wait_for
from jobq.jobs import operations
from jobq.errors import DeadLetterGroupNotFound, InvalidArgument

pytestmark = [pytest.mark.control, pytest.mark.db]


def start_and_run(conn, action, chunk=1000, **kwargs):
    operation = operations.start(conn, action, actor="test", **kwargs)
    seen = []
    done = operations.run(conn, operation, chunk=chunk, on_chunk=seen.append)
    return done, seen


def test_a_dry_run_counts_the_matching_jobs_and_changes_nothing(control):
    seed(control, 3, "pending", type="a")
    seed(control, 2, "done", type="b", error="ValueError: 50% off_by one")
    before = control.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    assert operations.count({"type": "a"}, conn=control) == 3
    assert operations.count({"error": "50% OFF_BY"}, conn=control) == 2
    assert operations.count({"error": "50_ off"}, conn=control) == 0  # _ and % are not wildcards
    assert control.execute("SELECT * FROM jobs ORDER BY id").fetchall() == before
    assert audit_actions(control) == []


def test_a_bulk_retry_replays_the_dead_letters_chunk_by_chunk_and_links_each_job(control):
    seed_dead(control, 2500, tags=["nightly"])
    done, seen = start_and_run(control, "retry", job_filter={"status": "dead"})
    assert (done.state, done.matched, done.changed, done.skipped) == ("done", 2500, 2500, 0)
    assert [op.matched for op in seen] == [1000, 2000, 2500, 2500]  # three chunks, then the end
    linked = control.execute(
        "SELECT count(*) FROM jobs AS o JOIN dead_letter_jobs AS d ON d.original_id = o.id "
        "JOIN jobs AS n ON n.id = o.retried_as AND n.id = d.replayed_as "
        "WHERE n.status = 'pending' AND n.payload = d.payload AND n.tags = '{nightly}' AND d.replayed_at IS NOT NULL"
    ).fetchone()[0]
    assert linked == 2500
    assert statuses(control) == {"dead": 2500, "pending": 2500}
    # Once: a second run finds them all retried already.
    again, _ = start_and_run(control, "retry", job_filter={"status": "dead"})
    assert (again.matched, again.changed, again.skipped) == (2500, 0, 2500)
    assert statuses(control) == {"dead": 2500, "pending": 2500}
    assert [(action, counts) for action, _, counts in audit_actions(control)] == [
        ("bulk_retry", {"state": "running"}),
        ("bulk_retry", {"state": "done", "matched": 2500, "changed": 2500, "skipped": 0}),
        ("bulk_retry", {"state": "running"}),
        ("bulk_retry", {"state": "done", "matched": 2500, "changed": 0, "skipped": 2500}),
    ]
    assert audit_actions(control)[0][1] == {"operation": done.id, "filter": {"status": "dead"}}


def test_a_bulk_retry_copies_cancelled_jobs_and_acts_only_on_rows_that_existed_when_it_started(control):
    ids = seed(control, 5, "cancelled", type="c", tags=["x", "y"])
    done, _ = start_and_run(control, "retry", chunk=2, job_filter={"type": "c"})
    assert (done.matched, done.changed, done.skipped) == (5, 5, 0)  # not the five copies made meanwhile
    copies = control.execute(
        "SELECT n.status, n.tags, n.payload = o.payload FROM jobs AS o JOIN jobs AS n ON n.id = o.retried_as "
        "WHERE o.id = ANY(%s)", (ids,)
    ).fetchall()
    assert copies == [("pending", ["x", "y"], True)] * 5


def test_a_bulk_delete_removes_pending_and_finished_jobs_never_claimed_or_running_ones(control):
    for status, n in (("pending", 4), ("claimed", 2), ("running", 3), ("done", 1), ("dead", 1), ("cancelled", 2)):
        seed(control, n, status, type=f"t-{status}", queue="q")
    done, _ = start_and_run(control, "delete", job_filter={"queue": "q"})
    assert (done.matched, done.changed, done.skipped) == (13, 8, 5)
    assert statuses(control) == {"claimed": 2, "running": 3}
    depth = dict(control.execute("SELECT name, sum(n) FROM job_counters WHERE name IN ('pending', 'claimed') GROUP BY name"))
    assert depth == {"pending": 0, "claimed": 2}  # the counters followed


@pytest.mark.parametrize(
    ("action", "extra", "changed", "check"),
    [
        ("cancel", {}, 4, "SELECT count(*) FROM jobs WHERE status = 'cancelled' AND cancelled_by = 'test'"),
        ("run_now", {}, 3, "SELECT count(*) FROM jobs WHERE status = 'pending' AND run_at <= now()"),
        ("set_priority", {"priority": 9}, 3, "SELECT count(*) FROM jobs WHERE priority = 9"),
    ],
)
def test_each_action_changes_only_the_rows_it_applies_to(control, action, extra, changed, check):
    seed(control, 3, "pending", type="s", delay=3600)
    seed(control, 1, "running", type="r")
    seed(control, 2, "done", type="d")
    done, _ = start_and_run(control, action, job_filter={"created_after": "2000-01-01T00:00:00Z"}, **extra)
    assert (done.matched, done.changed, done.skipped) == (6, changed, 6 - changed)
    assert control.execute(check).fetchone()[0] == changed


def test_rows_another_session_holds_are_skipped_and_counted_not_waited_for(control, database_url):
    ids = seed(control, 10, "pending", type="held")
    with psycopg.connect(database_url) as other:
        other.execute("SELECT id FROM jobs WHERE id = ANY(%s) FOR UPDATE", (ids[:4],))
        started = time.monotonic()
        done, _ = start_and_run(control, "delete", job_filter={"type": "held"})
        assert time.monotonic() - started < 5
    assert (done.matched, done.changed, done.skipped) == (10, 6, 4)
    assert [row[0] for row in control.execute("SELECT id FROM jobs ORDER BY id")] == ids[:4]


def test_a_dead_letter_group_is_replayed_or_discarded_as_one_operation(control):
    seed_dead(control, 30, type="pay")
    seed_dead(control, 5, type="mail")
    group = control.execute("SELECT id FROM jobq_dead_letter_groups WHERE type = 'pay'").fetchone()[0]
    done, _ = start_and_run(control, "replay", chunk=7, dead_letter_group=group)
    assert (done.target, done.matched, done.changed) == ({"dead_letter_group": group}, 30, 30)
    assert control.execute("SELECT count FROM jobq_dead_letter_groups WHERE id = %s", (group,)).fetchone()[0] == 0
    assert statuses(control) == {"dead": 35, "pending": 30}
    mail = control.execute("SELECT id FROM jobq_dead_letter_groups WHERE type = 'mail'").fetchone()[0]
    discarded, _ = start_and_run(control, "discard", dead_letter_group=mail)
    assert (discarded.matched, discarded.changed) == (5, 5)
    assert control.execute("SELECT count(*) FROM dead_letter_jobs WHERE type = 'mail'").fetchone()[0] == 0
    with pytest.raises(DeadLetterGroupNotFound):
        operations.start(control, "replay", actor="test", dead_letter_group="0123456789abcdef")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"action": "explode", "job_filter": {"status": "dead"}}, "action"),
        ({"action": "retry", "job_filter": {}}, "filter"),
        ({"action": "retry", "job_filter": {"stauts": "dead"}}, "filter.stauts"),
        ({"action": "retry", "job_filter": {"status": "gone"}}, "filter.status"),
        ({"action": "retry", "job_filter": {"ids": [1, 0]}}, "filter.ids[1]"),
        ({"action": "retry", "job_filter": {"status": "dead"}, "priority": 3}, "priority"),
        ({"action": "set_priority", "job_filter": {"status": "pending"}}, "priority"),
        ({"action": "set_priority", "job_filter": {"status": "pending"}, "priority": 11}, "priority"),
        ({"action": "discard", "dead_letter_group": "0123456789abcdef", "job_filter": None}, None),
    ],
)
def test_a_bad_request_is_refused_naming_the_field_and_records_nothing(control, kwargs, field):
    if field is None:  # a group action's name on the group path is fine; unknown group
        with pytest.raises(DeadLetterGroupNotFound):
            operations.start(control, actor="test", **kwargs)
    else:
        with pytest.raises(InvalidArgument) as caught:
            operations.start(control, actor="test", **kwargs)
        assert caught.value.field == field
    assert control.execute("SELECT count(*) FROM jobq_operations").fetchone()[0] == 0
    assert audit_actions(control) == []


def test_resume_stalled_leaves_alone_an_operation_whose_runner_is_alive(control, database_url):
    seed(control, 3, "pending", type="alive")
    operation = operations.start(control, "delete", actor="test", job_filter={"type": "alive"})
    with psycopg.connect(database_url, autocommit=True) as maintenance:
        assert operations.resume_stalled(maintenance) == 0
    assert operations.run(control, operation).changed == 3
    with psycopg.connect(database_url, autocommit=True) as maintenance:
        assert operations.resume_stalled(maintenance) == 0  # done: nothing to resume


RUNNER = """
import sys, time, psycopg
from jobq.jobs import operations
conn = psycopg.connect(sys.argv[1], autocommit=True)
operation = operations.start(conn, "retry", actor="doomed", job_filter={"status": "dead"})
operations.run(conn, operation, chunk=100, on_chunk=lambda op: time.sleep(0.2))
"""


def test_an_operation_whose_runner_was_killed_is_finished_by_resume_stalled_exactly_once(control, database_url):
    seed_dead(control, 1000)
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, database_url], env={**os.environ, "DATABASE_URL": database_url})
    try:
        deadline = time.monotonic() + 30
        while control.execute("SELECT coalesce(max(cursor), 0) FROM jobq_operations").fetchone()[0] == 0:
            assert time.monotonic() < deadline and runner.poll() is None, "the runner did no chunk"
            time.sleep(0.05)
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    state, changed = control.execute("SELECT state, changed FROM jobq_operations").fetchone()
    assert state == "running" and 0 < changed < 1000
    # The killed runner's backend ends a moment after its client: until then its lock
    # stands and resume_stalled rightly leaves the operation alone (returns 0).
    wait_for(lambda: operations.resume_stalled(control) == 1, 10, "the operation resumed once its runner's session ended")
    done = operations.get(control.execute("SELECT id FROM jobq_operations").fetchone()[0], conn=control)
    assert (done.state, done.matched, done.changed, done.skipped) == ("done", 1000, 1000, 0)
    assert statuses(control) == {"dead": 1000, "pending": 1000}  # each job retried once
    assert control.execute("SELECT count(DISTINCT replayed_as) FROM dead_letter_jobs").fetchone()[0] == 1000
    assert [counts["state"] for _, _, counts in audit_actions(control)] == ["running", "done"]


def test_jobq_bulk_dry_runs_runs_with_a_progress_bar_and_names_a_bad_option(control, database_url):
    from support.cli import run_cli

    seed_dead(control, 1500, queue="q")
    dry = run_cli("bulk", "retry", "--queue", "q", "--status", "dead", "--dry-run", DATABASE_URL=database_url)
    assert (dry.returncode, dry.stdout.strip()) == (0, "jobq: 1500 job(s) match; nothing changed (dry run)")
    done = run_cli("bulk", "retry", "--queue", "q", "--error", "LOST", DATABASE_URL=database_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("done: 1500 matched, 1500 changed, 0 skipped")
    assert "operation 1: retry" in done.stdout  # the progress bar's label (no terminal: printed once)
    bad = run_cli("bulk", "set_priority", "--queue", "q", DATABASE_URL=database_url)
    assert (bad.returncode, bad.stderr.strip()) == (1, "jobq: priority: set_priority needs a priority from 1 to 10")
    empty = run_cli("bulk", "delete", DATABASE_URL=database_url)
    assert empty.returncode == 1 and empty.stderr.startswith("jobq: filter: name at least one criterion")
    assert statuses(control) == {"dead": 1500, "pending": 1500}
    assert [(counts["state"], target["operation"]) for _, target, counts in audit_actions(control)] == [
        ("running", 1), ("done", 1)]
    [actor] = {actor for (actor,) in control.execute("SELECT actor FROM jobq_audit")}
    assert actor.startswith("cli:") and actor == control.execute("SELECT actor FROM jobq_operations").fetchone()[0]
