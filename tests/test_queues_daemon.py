"""Pausing a queue end to end: two real supervisors on one database, the pause and the
resume through a real Gunicorn over HTTP."""

from __future__ import annotations

import time

import pytest

import jobq
from support.db import scalar
from support.waiting import wait_for
from support.web_server import WebServer

pytestmark = [pytest.mark.db, pytest.mark.daemon, pytest.mark.control]

JOB_SECONDS = 0.1  # longer than a short job (jobq.daemon.worker.loop.SHORT_JOB): claims stay one job each
PAUSED_FOR = 3.0
# A claim statement already running when the pause commits works from a snapshot taken
# before it: the job it took may start a few milliseconds after the pause answered
# (the worker gives back the rest of its batch when it hears the pause). 0.3 s is that
# window with room for a slow machine, and still three jobs' length.
MARGIN = 0.3

STARTED_AFTER = (
    "SELECT count(*) FROM jobs WHERE queue = %s AND started_at > %s::timestamptz + make_interval(secs => %s)"
)
DONE = "SELECT count(*) FROM jobs WHERE queue = %s AND status = 'done'"
STARTED = "SELECT count(*) FROM jobs WHERE queue = %s AND started_at IS NOT NULL"


@pytest.fixture
def web(database_url, tmp_path):
    server = WebServer(database_url, tmp_path).start()
    yield server
    server.stop()


def test_a_paused_queue_starts_no_job_on_two_supervisors_until_it_is_resumed(ledger, daemon, web):
    conn = ledger
    sleep = {"type": "ledger_sleep", "payload": {"seconds": JOB_SECONDS}}
    # Enqueued first, so claimed first (same priority, earlier run_at): until the pause,
    # the workers run only the held queue's jobs.
    jobq.enqueue_many([{**sleep, "queue": "held"}] * 60, conn=conn)
    jobq.enqueue_many([{**sleep, "queue": "other"}] * 150, conn=conn)
    for _ in range(2):
        daemon(2, JOBQ_QUEUES="held,other")
    wait_for(lambda: scalar(conn, STARTED, "held") >= 4, 20, "the held queue's jobs to start")

    paused = web.request("POST", "/queues/held/pause", {"reason": "e2e"})
    returned_at = scalar(conn, "SELECT clock_timestamp()")
    assert paused.status == 200 and paused.json() == {"queues": ["held"], "changed": ["held"], "unknown": []}, paused.body
    other_done = scalar(conn, DONE, "other")

    time.sleep(PAUSED_FOR)
    assert scalar(conn, STARTED_AFTER, "held", returned_at, MARGIN) == 0
    assert scalar(conn, DONE, "other") >= other_done + 10  # the other queue kept being served
    held = web.request("GET", "/queues").json()["queues"][0]
    assert (held["name"], held["paused"], held["reason"], held["workers"]) == ("held", True, "e2e", 4)
    assert held["depth"]["pending"] > 0

    assert web.request("POST", "/queues/held/resume").json() == {"queues": ["held"], "changed": ["held"], "unknown": []}
    wait_for(lambda: scalar(conn, DONE, "held") == 60 and scalar(conn, DONE, "other") == 150, 30, "every job done")
    assert scalar(conn, "SELECT count(DISTINCT job_id) FROM test_ledger") == 210
