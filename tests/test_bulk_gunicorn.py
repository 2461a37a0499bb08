"""Bulk operations through a real Gunicorn: 50,000 dead jobs retried by filter in
chunks while the API keeps answering; an operation whose Gunicorn was killed is
finished by the daemon's maintenance leader."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from support.rows import seed_dead, statuses
from support.web_server import WebServer

pytestmark = [pytest.mark.control, pytest.mark.api, pytest.mark.db]

DEADLINE = 120.0  # seconds: generous, not a speed assertion
SLOW_ANSWER = 10.0  # seconds: an answer slower than this while the operation runs is a failure


@pytest.fixture
def server(database_url: str, tmp_path) -> Iterator[WebServer]:
    web = WebServer(database_url, tmp_path).start()
    yield web
    web.stop()


def test_a_bulk_retry_of_50000_dead_jobs_runs_in_chunks_while_the_api_keeps_answering(server, control):
    seed_dead(control, 50_000, queue="bulk")
    started = server.request("POST", "/jobs/bulk", {"filter": {"status": "dead", "queue": "bulk"}, "action": "retry"})
    assert started.status == 202, started.body
    operation_id = started.json()["id"]
    deadline = time.monotonic() + DEADLINE
    progress, answered_while_running, slowest = [], 0, 0.0
    while True:
        operation = server.request("GET", f"/operations/{operation_id}").json()
        if operation["state"] != "running":
            break
        progress.append(operation["matched"])
        for method, path, body, status in (("GET", "/health", None, 200), ("POST", "/jobs", {"type": "noop"}, 201)):
            asked = time.monotonic()
            reply = server.request(method, path, body, timeout=SLOW_ANSWER)
            slowest = max(slowest, time.monotonic() - asked)
            assert reply.status == status, reply.body
        answered_while_running += 1
        assert time.monotonic() < deadline, operation
    assert (operation["state"], operation["matched"], operation["changed"], operation["skipped"]) == (
        "done", 50_000, 50_000, 0)
    assert answered_while_running >= 3, progress
    partial = [n for n in progress if 0 < n < 50_000]
    assert partial and all(n % 1000 == 0 for n in partial)  # seen between chunks of 1,000
    assert statuses(control) == {"dead": 50_000, "pending": 50_000 + answered_while_running}
    unlinked = control.execute(
        "SELECT count(*) FROM dead_letter_jobs AS d JOIN jobs AS j ON j.id = d.original_id "
        "WHERE d.replayed_as IS DISTINCT FROM j.retried_as OR d.replayed_as IS NULL"
    ).fetchone()[0]
    assert unlinked == 0
    print(f"\n50,000 retried; {answered_while_running} health+enqueue pairs answered meanwhile, slowest {slowest:.2f} s")


def test_an_operation_left_running_by_a_killed_gunicorn_is_finished_by_the_maintenance_leader(
    server, control, daemon
):
    seed_dead(control, 20_000, queue="bulk")
    started = server.request("POST", "/jobs/bulk", {"filter": {"queue": "bulk"}, "action": "retry"})
    operation_id = started.json()["id"]
    deadline = time.monotonic() + DEADLINE
    while control.execute("SELECT matched FROM jobq_operations WHERE id = %s", (operation_id,)).fetchone()[0] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(server.proc.pid, signal.SIGKILL)  # the arbiter and its workers, the runner's thread with them
    server.proc.wait()
    time.sleep(0.5)  # its sessions end; the operation's lock with them
    state, matched = control.execute("SELECT state, matched FROM jobq_operations WHERE id = %s", (operation_id,)).fetchone()
    assert state == "running" and matched < 20_000, "the operation finished before the kill: seed more"
    daemon(1, JOBQ_QUEUES="default")  # not the queue of the retried jobs: they stay pending
    while control.execute("SELECT state FROM jobq_operations WHERE id = %s", (operation_id,)).fetchone()[0] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    row = control.execute("SELECT state, matched, changed FROM jobq_operations WHERE id = %s", (operation_id,)).fetchone()
    assert row == ("done", 20_000, 20_000)
    assert statuses(control) == {"dead": 20_000, "pending": 20_000}
