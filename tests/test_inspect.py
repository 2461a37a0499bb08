import json

import psycopg
import pytest

import jobq
from jobq.daemon import presence
from support.claims import claim, drain
from support.cli import run_cli

pytestmark = pytest.mark.db


def test_inspect_json_reports_depth_workers_failures_dead_letters_and_locks(conn, database_url):
    jobq.enqueue_many([{"type": "noop"}] * 2 + [{"type": "always_fail", "max_retries": 0}], conn=conn)
    drain(conn)
    jobq.enqueue("noop", queue="mail", conn=conn)
    presence.register(conn, "host:9:abc", "host", 9, ["mail"])
    with psycopg.connect(database_url, autocommit=True) as worker:
        (held,) = claim(worker, 1, ["mail"], worker_id="host:9:abc")
        worker_pid = worker.info.backend_pid
        jobq.enqueue("noop", queue="mail", conn=conn)
        result = run_cli("inspect", "--json", DATABASE_URL=database_url)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["depth"] == {"pending": 1, "claimed": 1, "running": 0, "done": 2, "failed": 0, "dead": 1, "cancelled": 0,
                             "waiting": 0}
    assert data["queues"]["mail"]["claimed"] == 1 and data["queues"]["default"]["done"] == 2
    assert [w["id"] for w in data["workers"]] == ["host:9:abc"]
    assert data["oldest_pending"]["queue"] == "mail"
    assert [f["type"] for f in data["recent_failures"]] == ["always_fail"]
    assert data["dead_letters_waiting"] == 1 and data["dead_letters"][0]["type"] == "always_fail"
    assert [(lock["holds"], lock["pid"]) for lock in data["advisory_locks"]] == [(f"job {held.job.id}", worker_pid)]
    assert data["totals"]["enqueued_total"] == 5
    assert data["no_handler"] == {}  # the one live worker (registered before schema 17's announcement) did not say


def test_inspect_shows_pending_jobs_of_a_type_no_live_worker_has_a_handler_for(conn, database_url):
    jobq.enqueue("noop", conn=conn)
    jobq.enqueue_many([{"type": "sned_receipt"}] * 2, conn=conn)  # a typo of send_receipt
    presence.register(conn, "host:9:abc", "host", 9, ["default"], handler_types=["noop", "send_receipt"])
    data = json.loads(run_cli("inspect", "--json", DATABASE_URL=database_url).stdout)
    assert data["no_handler"] == {"sned_receipt": 2}
    shown = run_cli("inspect", DATABASE_URL=database_url, COLUMNS="200").stdout
    assert "no handler" in shown and "sned_receipt" in shown


def test_inspect_prints_tables(conn, database_url):
    jobq.enqueue("noop", conn=conn)
    result = run_cli("inspect", DATABASE_URL=database_url, COLUMNS="160")
    assert result.returncode == 0, result.stderr
    for title in ("depth by queue and status", "workers", "oldest due pending job", "recent failures",
                  "dead letters waiting", "advisory locks held"):
        assert title in result.stdout


def test_inspect_lists_only_the_advisory_locks_of_its_own_database(conn, database_url, server_url):
    """pg_locks shows every database's locks: another jobq's on the same server are not ours."""
    from jobq.observe.inspection import snapshot
    from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
    from jobq.store import locks
    from support.db import on

    other_key = locks.key(DEFAULT_ADVISORY_NAMESPACE, 987654)
    with psycopg.connect(on(server_url, "postgres"), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (other_key,))
        with psycopg.connect(database_url, autocommit=True) as ours:
            ours.execute("SELECT pg_advisory_lock(%s)", (locks.key(DEFAULT_ADVISORY_NAMESPACE, 123456),))
            held = snapshot(conn, namespace=DEFAULT_ADVISORY_NAMESPACE).to_dict()["advisory_locks"]
    assert [lock["holds"] for lock in held] == ["job 123456"]


def test_inspect_leaves_out_of_recent_failures_a_step_cancelled_by_its_dead_parent(conn, database_url):
    """The step carries an error (the reason, naming its parent) but ran no attempt: not a
    failure, and no run's time to show (`jobq inspect` failed on it)."""
    wf = jobq.Workflow(name="broken")
    parent = wf.add("always_fail", max_retries=0)
    wf.add("noop", after=[parent])
    run = wf.enqueue(conn=conn)
    drain(conn)
    step = jobq.get(run.jobs["noop"].id, conn=conn)
    assert step.status == "cancelled" and "always_fail" in step.error
    data = json.loads(run_cli("inspect", "--json", DATABASE_URL=database_url).stdout)
    assert [f["id"] for f in data["recent_failures"]] == [run.jobs["always_fail"].id]
    shown = run_cli("inspect", DATABASE_URL=database_url, COLUMNS="200")
    assert shown.returncode == 0, shown.stderr
    assert "always_fail" in shown.stdout
