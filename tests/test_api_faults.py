"""Faults in the middle of ``POST /jobs``, on a real PostgreSQL: a statement that is stuck,
a connection cut while the group's insert commits. Every request answers (201, or 503
with the JSON error shape) within a bound, and its answer is the truth: a 201's job is
stored, once; a 503's is not (or its detail names the id it may have).

A stuck insert is made real by a transaction of the test's holding a lock the insert
needs; a cut commit by pg_terminate_backend on the inserting session, while it waits
for the lock (before its commit) or while its commit waits for a synchronous standby
that never answers (after the commit record is written: PostgreSQL keeps it committed).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask
from psycopg.conninfo import make_conninfo

import jobq
from support.api import assert_error, job_rows
from jobq.errors import ConfigError
from jobq.settings import Settings
from web.app import create_app
from web.context import EXTENSION

pytestmark = [pytest.mark.api, pytest.mark.db]

STATEMENT_TIMEOUT = 1.0
ANSWERED = 30.0  # how long any request may take here: statement timeouts, retries, slack
SEEN = 10.0  # how long the test waits to see a session reach a state

INSERTS = "query LIKE 'INSERT INTO jobs%'"


class Requests:
    """``POST /jobs`` from threads of their own, one test client each; body n has payload {"n": n}."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.threads: dict[int, threading.Thread] = {}
        self.replies: dict[int, Any] = {}

    def post(self, *numbers: int) -> None:
        for n in numbers:
            thread = threading.Thread(target=self._post, args=(n,), daemon=True)
            self.threads[n] = thread
            thread.start()

    def _post(self, n: int) -> None:
        self.replies[n] = self.app.test_client().post("/jobs", json={"type": "noop", "payload": {"n": n}})

    def wait(self, *numbers: int, timeout: float = ANSWERED) -> dict[int, Any]:
        """The replies to ``numbers`` (default: all); fails naming those unanswered in ``timeout``."""
        deadline = time.monotonic() + timeout
        numbers = numbers or tuple(self.threads)
        for n in numbers:
            self.threads[n].join(max(0.0, deadline - time.monotonic()))
        late = [n for n in numbers if self.threads[n].is_alive()]
        assert not late, f"requests {late} unanswered after {timeout:g} s"
        return {n: self.replies[n] for n in numbers}


def stored(conn: psycopg.Connection) -> dict[int, list[int]]:
    """payload n -> the ids of the jobs stored with it."""
    found: dict[int, list[int]] = {}
    for n, job_id in conn.execute("SELECT (payload->>'n')::int, id FROM jobs ORDER BY id"):
        found.setdefault(n, []).append(job_id)
    return found


def assert_the_truth(replies: dict[int, Any], conn: psycopg.Connection) -> None:
    """Every 201 is its job, stored once; every 503 stored nothing; nothing else answered."""
    rows = stored(conn)
    for n, reply in replies.items():
        if reply.status_code == 201:
            assert rows.get(n) == [reply.json["id"]], (n, reply.json, rows.get(n))
            assert reply.json["payload"] == {"n": n}
        else:
            assert_error(reply, 503)
            assert n not in rows, (n, rows[n])
    assert set(rows) <= set(replies)


def wait_for_session(conn: psycopg.Connection, condition: str) -> int:
    """The pid of a jobq-web session matching ``condition`` (SQL on pg_stat_activity)."""
    deadline = time.monotonic() + SEEN
    while True:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'jobq-web' AND datname = current_database() "
            f"AND {condition}"  # noqa: S608
        ).fetchone()
        if row is not None:
            return row[0]
        assert time.monotonic() < deadline, f"no session with {condition} within {SEEN:g} s"
        time.sleep(0.01)


def queued(app: Flask, count: int) -> None:
    """Wait until ``count`` requests are queued behind the insert in flight."""
    enqueuer = app.extensions[EXTENSION].enqueuer
    deadline = time.monotonic() + SEEN
    while len(enqueuer._waiting) < count:
        assert time.monotonic() < deadline, f"{len(enqueuer._waiting)} of {count} requests queued"
        time.sleep(0.01)


@pytest.fixture
def holder(database_url: str) -> Iterator[psycopg.Connection]:
    """A connection in a transaction of its own: the locks it takes hold until it rolls back."""
    with psycopg.connect(database_url) as connection:
        yield connection
        connection.rollback()


def test_a_stuck_statement_answers_503_within_the_statement_timeout_and_stores_nothing(make_app, conn, holder):
    app = make_app(api_statement_timeout=STATEMENT_TIMEOUT)
    requests = Requests(app)
    holder.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")  # every insert waits for it
    try:
        requests.post(*range(6))
        replies = requests.wait()
    finally:
        holder.rollback()
    for reply in replies.values():
        assert_error(reply, 503)
        assert int(reply.headers["Retry-After"]) > 0
    assert job_rows(conn) == 0

    holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")  # reads wait too
    try:
        client = app.test_client()
        for path in ("/jobs?type=noop", "/jobs/1"):
            assert_error(client.get(path), 503)
    finally:
        holder.rollback()
    assert app.test_client().post("/jobs", json={"type": "noop"}).status_code == 201


def test_callers_inside_a_stuck_then_freed_insert_get_201_and_only_their_jobs_are_stored(make_app, conn, holder):
    app = make_app(api_statement_timeout=2.0)
    requests = Requests(app)
    holder.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    try:
        requests.post(0)
        wait_for_session(conn, f"wait_event_type = 'Lock' AND {INSERTS}")
        requests.post(1, 2, 3, 4)  # queued behind 0, then inserted together once 0 has timed out
        assert_error(requests.wait(0)[0], 503)
        holder.rollback()  # frees the insert of 1..4, now in flight
        requests.post(5, 6)
        replies = requests.wait()
    finally:
        holder.rollback()
    assert_the_truth(replies, conn)
    assert {n for n, reply in replies.items() if reply.status_code == 201} == {1, 2, 3, 4, 5, 6}


def test_every_caller_of_a_group_whose_commit_was_cut_gets_its_stored_job_and_no_second_copy(own_postgres):
    url = own_postgres.url()
    with psycopg.connect(url, autocommit=True) as admin:
        # The sequence now logs ahead, so reserving ids writes no WAL and waits for no standby.
        admin.execute("SELECT nextval(pg_get_serial_sequence('jobs', 'id'))")
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'jobq_test_absent_standby'")
        admin.execute("SELECT pg_reload_conf()")
        app = create_app(Settings.from_env({}, database_url=make_conninfo(url, options="-c synchronous_commit=on")))
        requests = Requests(app)
        try:
            requests.post(0)
            first = wait_for_session(admin, f"wait_event = 'SyncRep' AND {INSERTS}")  # committed, unacknowledged
            requests.post(1, 2, 3)
            queued(app, 3)
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))
            second = wait_for_session(admin, f"wait_event = 'SyncRep' AND {INSERTS} AND pid <> {first}")
            admin.execute("SELECT pg_terminate_backend(%s)", (second,))
            replies = requests.wait()
        finally:
            admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            admin.execute("SELECT pg_reload_conf()")
            requests.wait(timeout=ANSWERED)
            with app.app_context():
                app.extensions[EXTENSION].database.close()
        assert {n: reply.status_code for n, reply in replies.items()} == {0: 201, 1: 201, 2: 201, 3: 201}
        assert_the_truth(replies, admin)
        assert admin.execute("SELECT count(*) FROM jobs").fetchone() == (4,)


def test_an_insert_cut_before_its_commit_is_sent_again_until_it_goes_in_and_callers_queued_behind_it_leave_with_503(
    make_app, conn, holder
):
    app = make_app(api_statement_timeout=STATEMENT_TIMEOUT)
    requests = Requests(app)
    holder.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    try:
        requests.post(0)
        cut = wait_for_session(conn, f"wait_event_type = 'Lock' AND {INSERTS}")
        requests.post(1, 2)
        queued(app, 2)
        conn.execute("SELECT pg_terminate_backend(%s)", (cut,))
        # 0's insert is sent again and waits for the lock, time after time; 1 and 2 give up.
        for reply in requests.wait(1, 2).values():
            assert_error(reply, 503)
        holder.rollback()
        replies = requests.wait()
    finally:
        holder.rollback()
    assert replies[0].status_code == 201
    assert_the_truth(replies, conn)


def test_a_cut_insert_that_cannot_be_settled_in_time_answers_503_naming_the_id_its_job_may_have(
    make_app, conn, holder
):
    app = make_app(api_statement_timeout=0.5)
    app.extensions[EXTENSION].enqueuer._resolve_timeout = 2.0  # instead of 10 s
    requests = Requests(app)
    holder.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")  # held past every retry
    try:
        requests.post(0)
        cut = wait_for_session(conn, f"wait_event_type = 'Lock' AND {INSERTS}")
        conn.execute("SELECT pg_terminate_backend(%s)", (cut,))
        reply = requests.wait(0)[0]
    finally:
        holder.rollback()
    detail = assert_error(reply, 503)
    found = re.fullmatch(r"database unavailable; job (\d+) may have been stored: GET /jobs/\1 before sending it again",
                         detail)
    assert found, detail
    assert_error(app.test_client().get(f"/jobs/{found[1]}"), 404)  # it was not: GET tells
    assert job_rows(conn) == 0


def test_ids_reserved_before_the_id_sequence_is_restarted_are_not_used(make_app, conn, holder):
    # Used, they would be handed out again by the restarted sequence: another insert
    # would fail on the primary key.
    app = make_app()
    requests = Requests(app)
    holder.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    try:
        conn.execute("SELECT nextval(pg_get_serial_sequence('jobs', 'id')) FROM generate_series(1, 100)")
        requests.post(0)  # reserves 101, then waits for the lock
        wait_for_session(conn, f"wait_event_type = 'Lock' AND {INSERTS}")
        holder.execute("TRUNCATE jobs RESTART IDENTITY")
        holder.commit()
        reply = requests.wait(0)[0]
    finally:
        holder.rollback()
    assert reply.status_code == 201 and reply.json["id"] == 1
    assert jobq.enqueue("noop", conn=conn).id == 2


def test_every_web_connection_runs_under_the_statement_timeout_unless_the_url_sets_its_own(make_app, database_url):
    app = make_app(api_statement_timeout=2.5)
    with app.app_context():
        with app.extensions[EXTENSION].database.connection() as pooled:
            assert pooled.execute("SHOW statement_timeout").fetchone() == ("2500ms",)
    url = make_conninfo(database_url, options="-c statement_timeout=7s")
    own = make_app(database_url=url, api_statement_timeout=2.5)
    with own.app_context():
        with own.extensions[EXTENSION].database.connection() as pooled:
            assert pooled.execute("SHOW statement_timeout").fetchone() == ("7s",)


def test_a_bad_statement_timeout_names_its_variable():
    assert Settings.from_env({}).api_statement_timeout == 5.0
    for bad in ("soon", "-1", "inf"):
        with pytest.raises(ConfigError, match="^JOBQ_API_STATEMENT_TIMEOUT: "):
            Settings.from_env({"JOBQ_API_STATEMENT_TIMEOUT": bad})
