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


def test_inspect_prints_tables(conn, database_url):
    jobq.enqueue("noop", conn=conn)
    result = run_cli("inspect", DATABASE_URL=database_url, COLUMNS="160")
    assert result.returncode == 0, result.stderr
    for title in ("depth by queue and status", "workers", "oldest due pending job", "recent failures",
                  "dead letters waiting", "advisory locks held"):
        assert title in result.stdout
