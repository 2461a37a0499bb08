"""Logs: one line per event, JSON when asked, and never a payload, token or password."""

import json
import time

import psycopg
import pytest

import jobq
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon]

PAYLOAD_SECRET = "payload-secret-4242"
PASSWORD = "db-password-7731"


def with_password(url: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")


def test_worker_logs_are_json_lines_without_payloads_or_passwords(own_postgres, daemon):
    url = with_password(own_postgres.url())  # the embedded server trusts local users: any password works
    with psycopg.connect(url, autocommit=True) as conn:
        jobs = jobq.enqueue_many(
            [
                {"type": "echo", "payload": {"secret": PAYLOAD_SECRET}},
                {"type": "leaky_fail", "payload": {"secret": PAYLOAD_SECRET}, "max_retries": 1},
                {"type": "no_such_type", "payload": {"secret": PAYLOAD_SECRET}, "max_retries": 0},
            ],
            conn=conn,
        )
        d = daemon(1, url=url, JOBQ_LOG_FORMAT="json", JOBQ_BACKOFF_BASE="0.1", JOBQ_LOG_LEVEL="DEBUG")
        wait_for(lambda: all(jobq.get(j.id, conn=conn).status in ("done", "dead") for j in jobs), 20, "all jobs finished")
    own_postgres.stop()  # an outage: connection errors get logged too
    time.sleep(1)
    own_postgres.start()
    time.sleep(1.5)
    log = d.log()
    events = [json.loads(line) for line in log.splitlines()]
    messages = [e["message"] for e in events]
    for event in ("worker.started", "job.claimed", "job.succeeded", "job.retry_scheduled", "job.dead_lettered",
                  "worker.connection_lost", "worker.reconnected"):
        assert any(m.startswith(event) for m in messages), event
    assert all({"time", "level", "logger", "pid", "message"} <= set(e) for e in events)
    dead = next(m for m in messages if m.startswith("job.dead_lettered") and "leaky_fail" in m)
    assert "error=RuntimeError" in dead and f"id={jobs[1].id}" in dead and "attempt=1" in dead
    assert PAYLOAD_SECRET not in log
    assert PASSWORD not in log


def test_at_info_a_worker_logs_no_line_per_successful_job_but_every_failure(ledger, daemon):
    ok = jobq.enqueue_many([{"type": "echo"}] * 20, conn=ledger)
    steps = jobq.enqueue("progress_steps", {"steps": 4, "step_seconds": 0.4}, conn=ledger)
    bad = jobq.enqueue("leaky_fail", max_retries=0, conn=ledger)
    d = daemon(1, JOBQ_LOG_LEVEL="INFO")
    jobs = [*ok, steps, bad]
    wait_for(lambda: all(jobq.get(j.id, conn=ledger).status in ("done", "dead") for j in jobs), 30, "all finished")
    assert jobq.get(steps.id, conn=ledger).progress is not None  # its progress was written...
    log = d.log()
    assert "job.dead_lettered" in log and f"id={bad.id}" in log
    assert "job.claimed" not in log and "job.succeeded" not in log
    assert "job.progress" not in log  # ...and logged at DEBUG only
