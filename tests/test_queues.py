"""Pausing and resuming queues (jobq.jobs.queues), against the real database: the claim and
the idle timer leave paused queues out, the pause is announced and audited, and
listing shows every queue known."""

from __future__ import annotations

import json

import psycopg
import pytest

import jobq
from jobq.jobs import leases
from jobq.jobs import queues
from jobq.errors import InvalidArgument
from support.claims import LOCK_BASE, claim, settle
from support.cli import run_cli

pytestmark = [pytest.mark.db, pytest.mark.control]


def notifications(listener: psycopg.Connection) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in listener.notifies(timeout=0.2)]


@pytest.fixture
def listener(database_url, conn):
    with psycopg.connect(database_url, autocommit=True) as listening:
        listening.execute("LISTEN jobq")
        listening.execute("LISTEN jobq_control")
        yield listening


def test_a_paused_queue_is_not_claimed_while_the_others_are(conn):
    held = jobq.enqueue_many([{"type": "noop", "queue": "held"}] * 3, conn=conn)
    served = jobq.enqueue("noop", queue="served", conn=conn)
    queues.pause("held", conn=conn)
    assert [c.job.id for c in claim(conn, 10, ["held", "served"])] == [served.id]
    assert claim(conn, 10, ["held"]) == []
    queues.resume("held", conn=conn)
    assert sorted(c.job.id for c in claim(conn, 10, ["held", "served"])) == [j.id for j in held]


def test_the_idle_timer_leaves_paused_queues_out(conn):
    jobq.enqueue("noop", queue="held", conn=conn)
    queues.pause("held", conn=conn)
    assert leases.next_run_in(conn, ["held"]).result() is None  # nothing to wake up for: no spinning
    jobq.enqueue("noop", queue="served", conn=conn)
    assert leases.next_run_in(conn, ["held", "served"]).result() <= 0
    queues.resume("held", conn=conn)
    assert leases.next_run_in(conn, ["held"]).result() <= 0


def test_a_queue_can_be_paused_before_it_has_a_job_and_stays_paused(conn):
    assert queues.pause("later", reason="not yet", actor="ops", conn=conn).changed == ["later"]
    job = jobq.enqueue("noop", queue="later", conn=conn)  # enqueueing continues
    assert claim(conn, 10, ["later"]) == []
    (listed,) = queues.list_queues(stale_seconds=10, conn=conn)
    assert (listed.name, listed.paused, listed.paused_by, listed.reason) == ("later", True, "ops", "not yet")
    assert listed.depth["pending"] == 1 and jobq.get(job.id, conn=conn).status == "pending"


def test_pausing_a_paused_queue_keeps_the_first_pause_and_announces_nothing(conn, listener):
    assert queues.pause("q", reason="first", actor="alice", conn=conn).changed == ["q"]
    before = queues.list_queues(stale_seconds=10, conn=conn)
    assert queues.pause("q", reason="second", actor="bob", conn=conn).changed == []
    assert queues.list_queues(stale_seconds=10, conn=conn) == before
    assert notifications(listener) == [("jobq_control", "pause q")]
    assert queues.resume("q", conn=conn).changed == ["q"]
    assert queues.resume("q", conn=conn).changed == []
    assert notifications(listener) == [("jobq_control", "resume q")]  # nothing pending: no wake-up


def test_resume_announces_itself_and_wakes_idle_workers_with_the_pending_depth(conn, listener):
    jobq.enqueue_many([{"type": "noop", "queue": "q"}] * 4, conn=conn)
    queues.pause("q", conn=conn)
    notifications(listener)  # the enqueue's wake-up and the pause
    queues.resume("q", conn=conn)
    assert notifications(listener) == [("jobq_control", "resume q"), ("jobq", "q 4")]


def test_pause_and_its_audit_row_commit_together(conn):
    with pytest.raises(RuntimeError), conn.transaction():
        queues.pause("q", actor="ops:rolled-back", conn=conn)
        raise RuntimeError("the caller's transaction fails")
    assert queues.list_queues(stale_seconds=10, conn=conn) == []
    assert conn.execute("SELECT count(*) FROM jobq_audit WHERE actor = 'ops:rolled-back'").fetchone()[0] == 0
    queues.pause("q", reason="why", actor="ops:committed", conn=conn)
    queues.resume("q", actor="ops:committed", conn=conn)
    rows = conn.execute(
        "SELECT action, target, counts FROM jobq_audit WHERE actor = 'ops:committed' ORDER BY id"
    ).fetchall()
    assert rows == [
        ("pause", {"queue": "q", "reason": "why"}, {"queues": 1, "changed": 1}),
        ("resume", {"queue": "q"}, {"changed": 1}),
    ]


@pytest.mark.parametrize("bad", ["", "q" * 101, "a\x00b", "\ud800", None, 7])
def test_a_bad_queue_name_is_refused_naming_the_field(conn, bad):
    for action in (queues.pause, queues.resume):
        with pytest.raises(InvalidArgument) as caught:
            action(bad, conn=conn)
        assert caught.value.field == "name"
    with pytest.raises(InvalidArgument) as caught:
        queues.pause("q", reason="r\x00", conn=conn)
    assert caught.value.field == "reason"
    assert queues.list_queues(stale_seconds=10, conn=conn) == []


def test_list_shows_every_queue_known_with_every_status_workers_and_oldest_due(conn):
    for status in ("pending", "claimed", "running", "done", "dead"):
        jobq.enqueue("always_fail", queue="busy", max_retries=0, conn=conn)
        if status != "pending":
            (claimed,) = claim(conn, 1, ["busy"])
            settle(conn, claimed, status)
    jobq.cancel(jobq.enqueue("noop", queue="busy", conn=conn).id, conn=conn)
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, queues) VALUES ('h:1:x', 'h', 1, '{busy,fresh}'), "
        "('h:2:y', 'h', 2, '{busy}')"
    )
    conn.execute(
        "INSERT INTO workers (id, hostname, pid, queues, heartbeat_at) "
        "VALUES ('h:3:z', 'h', 3, '{gone}', now() - interval '1 hour')"
    )
    queues.pause("idle", conn=conn)
    listed = {q.name: q for q in queues.list_queues(stale_seconds=10, conn=conn)}
    assert list(listed) == ["busy", "fresh", "idle"]  # a stale worker's queue is not known
    busy = listed["busy"]
    assert busy.depth == {
        "pending": 1, "claimed": 1, "running": 1, "done": 1, "failed": 0, "dead": 1, "cancelled": 1, "waiting": 0,
    }
    assert (busy.paused, busy.workers) == (False, 2)
    assert busy.oldest_pending_age_seconds is not None and busy.oldest_pending_age_seconds >= 0
    assert (listed["fresh"].workers, listed["fresh"].depth["pending"], listed["fresh"].paused) == (1, 0, False)
    assert listed["idle"].paused and listed["idle"].oldest_pending_age_seconds is None
    assert set(busy.to_dict()) == {
        "name", "paused", "paused_at", "paused_by", "reason", "depth", "workers", "oldest_pending_age_seconds",
    }
    assert isinstance(listed["idle"].to_dict()["paused_at"], str)


def test_pause_all_pauses_every_queue_known_and_resume_all_every_paused_one(conn):
    jobq.enqueue("noop", queue="a", conn=conn)
    conn.execute("INSERT INTO workers (id, hostname, pid, queues) VALUES ('h:1:x', 'h', 1, '{b}')")
    queues.pause("c", conn=conn)
    change = queues.pause_all(reason="maintenance", conn=conn)
    assert (change.queues, change.changed) == (["a", "b", "c"], ["a", "b"])
    assert all(q.paused for q in queues.list_queues(stale_seconds=10, conn=conn))
    assert claim(conn, 10, ["a"]) == []
    change = queues.resume_all(conn=conn)
    assert change.changed == ["a", "b", "c"]
    assert not any(q.paused for q in queues.list_queues(stale_seconds=10, conn=conn))


def test_the_claim_checks_each_queue_once_and_still_walks_the_pending_index(conn):
    jobq.enqueue_many([{"type": "noop", "queue": f"q{i % 20}"} for i in range(20_000)], conn=conn)
    conn.execute("UPDATE jobs SET status = 'done' WHERE id % 10 <> 0")
    conn.execute("INSERT INTO jobq_queues (name, paused_at) SELECT 'p' || g, now() FROM generate_series(1, 2000) AS g")
    queues.pause("q9", conn=conn)
    conn.execute("ANALYZE jobs")
    conn.execute("ANALYZE jobq_queues")
    with conn.transaction(force_rollback=True):
        (plan,) = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + leases.claim_statement(10),
            {"queues": ["q9", "q19", "q3"], "worker_id": "w", "lock_base": LOCK_BASE, "hand_off": False},
        ).fetchone()[0]
    nodes = list(walk(plan["Plan"]))
    probes = [n for n in nodes if n.get("Relation Name") == "jobq_queues"]
    assert len(probes) == 1 and probes[0]["Actual Loops"] == 3, json.dumps(probes)  # once per queue
    assert probes[0].get("Index Name") == "jobq_queues_pkey"
    claim_scans = [n for n in nodes if n.get("Index Name") == "jobs_pending_claim_idx"]
    assert len(claim_scans) == 1 and claim_scans[0]["Actual Loops"] == 2  # the two queues not paused


def walk(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


def test_the_cli_pauses_lists_and_resumes(conn, database_url):
    jobq.enqueue("noop", queue="mail", conn=conn)
    env = {"DATABASE_URL": database_url}
    paused = run_cli("queues", "pause", "mail", "--reason", "smtp down", **env)
    assert (paused.returncode, paused.stdout.strip()) == (0, "jobq: queue mail paused"), paused.stderr
    listed = json.loads(run_cli("queues", "list", "--json", **env).stdout)["queues"]
    assert [(q["name"], q["paused"], q["reason"], q["depth"]["pending"]) for q in listed] == [
        ("mail", True, "smtp down", 1)
    ]
    assert listed[0]["paused_by"].startswith("cli:")
    assert "smtp down" in run_cli("queues", "list", COLUMNS="200", **env).stdout
    assert run_cli("queues", "resume", **env).returncode == 2  # neither a NAME nor --all
    resumed = run_cli("queues", "resume", "--all", **env)
    assert (resumed.returncode, resumed.stdout.strip()) == (0, "jobq: queue mail resumed"), resumed.stderr
    typo = run_cli("queues", "resume", "mial", **env)
    assert (typo.returncode, typo.stdout.strip()) == (0, "jobq: queue mial not resumed: it was never paused")
    assert typo.stderr.strip() == "jobq: warning: no job, worker or schedule has ever named queue 'mial': a typo?"
    bad = run_cli("queues", "pause", "", **env)
    assert (bad.returncode, bad.stderr.strip()) == (1, "jobq: name: must be a string of 1 to 100 characters")


def test_inspect_marks_the_paused_queues(conn):
    from jobq.observe import inspection
    from jobq.cli import inspect_view
    from rich.console import Console

    jobq.enqueue("noop", queue="mail", conn=conn)
    jobq.enqueue("noop", queue="reports", conn=conn)
    queues.pause("mail", actor="tester", conn=conn)
    snap = inspection.snapshot(conn, namespace=0)
    assert snap.paused_queues == ["mail"] and snap.to_dict()["paused_queues"] == ["mail"]
    console = Console(width=200, record=True)
    console.print(inspect_view.render(snap))
    shown = console.export_text()
    assert "mail (paused)" in shown and "reports (paused)" not in shown
