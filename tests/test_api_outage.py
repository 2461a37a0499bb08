"""A database outage under a real Gunicorn: bounded 503s with Retry-After, then recovery
with no restart, on a PostgreSQL instance of the test's own."""

from __future__ import annotations

import time

import pytest

from support.api import assert_error
from support.web_server import WebServer
from web.pool import POOL_TIMEOUT

pytestmark = [pytest.mark.api, pytest.mark.db]

# How long a request may take while the database is down: the pool's timeout and slack.
BOUNDED = POOL_TIMEOUT + 10
RECOVERY_DEADLINE = 60.0


def test_a_stopped_database_gives_bounded_503s_and_the_api_recovers_by_itself(own_postgres, tmp_path):
    server = WebServer(own_postgres.url(), tmp_path).start()
    try:
        before = server.request("POST", "/jobs", {"type": "noop"})
        assert before.status == 201

        own_postgres.stop()
        for method, path, body in (("POST", "/jobs", {"type": "noop"}), ("GET", "/ready", None)):
            started = time.monotonic()
            reply = server.request(method, path, body, timeout=BOUNDED)
            assert time.monotonic() - started < BOUNDED
            assert_error(reply, 503)
            assert int(reply.headers["Retry-After"]) > 0
        assert server.request("GET", "/health").status == 200  # liveness does not depend on the database

        own_postgres.start()
        deadline = time.monotonic() + RECOVERY_DEADLINE
        while (reply := server.request("POST", "/jobs", {"type": "noop"}, timeout=BOUNDED)).status != 201:
            assert reply.status == 503 and time.monotonic() < deadline
            time.sleep(0.5)
        # Each Gunicorn process's pool reconnects on its own backoff: another process may
        # still answer 503 for a moment after this one stored a job.
        while (reply := server.request("GET", f"/jobs/{before.json()['id']}", timeout=BOUNDED)).status != 200:
            assert reply.status == 503 and time.monotonic() < deadline
            time.sleep(0.5)
        assert reply.json() == before.json()
        while (ready := server.request("GET", "/ready", timeout=BOUNDED)).status != 200:
            assert ready.status == 503 and time.monotonic() < deadline
            time.sleep(0.5)
        assert "Traceback" not in server.log()
    finally:
        server.stop()
