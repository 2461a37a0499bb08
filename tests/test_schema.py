"""JOBQ_SCHEMA: two jobq installs in one database, one in public (the existing install)
and one in a schema of its own, each migrated by `jobq migrate` and each with its own
real supervisor. Neither sees the other's jobs, both elect a leader, and a wake-up of
one is never heard by the other."""

from __future__ import annotations

import psycopg
import pytest

import jobq
from jobq import settings
from jobq.store import locks
from jobq.store.connections import close_default_pool
from support.cli import run_cli
from support.db import THIS_DATABASE_LOCKS, scalar
from support.waiting import wait_for

pytestmark = [pytest.mark.db, pytest.mark.daemon, pytest.mark.schema]

OTHER = "other"
# Longer than any wait below: a job done in time was woken by NOTIFY, not found by a poll.
NO_POLL = {"JOBQ_POLL_INTERVAL": "60"}
LEADER_HELD = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted "
    f"AND ((classid::bigint << 32) | objid::bigint) = %s AND {THIS_DATABASE_LOCKS}"
)


@pytest.fixture
def two_installs(empty_database: str) -> str:
    """``empty_database`` with jobq migrated into public, then into OTHER beside it."""
    for env in ({}, {"JOBQ_SCHEMA": OTHER}):
        done = run_cli("migrate", DATABASE_URL=empty_database, **env)
        assert done.returncode == 0, done.stderr
    return empty_database


def status(conn: psycopg.Connection, schema: str, job_id: int) -> str | None:
    row = conn.execute(psycopg.sql.SQL("SELECT status FROM {}.jobs WHERE id = %s").format(
        psycopg.sql.Identifier(schema)), [job_id]).fetchone()
    return row[0] if row else None


@pytest.mark.unit
def test_the_advisory_namespace_follows_the_schema_unless_set():
    assert settings.schema_namespace("public") == settings.DEFAULT_ADVISORY_NAMESPACE
    assert settings.Settings.from_env({}).advisory_namespace == settings.DEFAULT_ADVISORY_NAMESPACE
    other = settings.Settings.from_env({"JOBQ_SCHEMA": OTHER})
    assert other.db_schema == OTHER
    assert other.advisory_namespace == settings.schema_namespace(OTHER) != settings.DEFAULT_ADVISORY_NAMESPACE
    given = settings.Settings.from_env({"JOBQ_SCHEMA": OTHER, "JOBQ_ADVISORY_NAMESPACE": "7"})
    assert given.advisory_namespace == 7


@pytest.mark.unit
def test_a_schema_name_that_needs_quoting_stops_start_up_naming_the_variable():
    with pytest.raises(jobq.ConfigError, match="JOBQ_SCHEMA"):
        settings.Settings.from_env({"JOBQ_SCHEMA": 'Other"; DROP'})


def test_each_install_has_its_objects_channels_and_pinned_functions(two_installs):
    with psycopg.connect(two_installs, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'jobs' ORDER BY 1").fetchall()
        assert tables == [("other",), ("public",)]
        assert scalar(conn, "SELECT public.jobq_wake_channel()") == "jobq"  # as before: untouched
        assert scalar(conn, "SELECT public.jobq_control_channel()") == "jobq_control"
        assert scalar(conn, "SELECT other.jobq_wake_channel()") == "jobq.other"
        assert scalar(conn, "SELECT other.jobq_control_channel()") == "jobq_control.other"
        pinned = dict(conn.execute(
            "SELECT n.nspname, bool_and(coalesce(p.proconfig, '{}') @> ARRAY['search_path=' || n.nspname || ', pg_temp']) "
            "FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace "
            "WHERE n.nspname IN ('public', 'other') AND p.proname ~ '^(jobq|jobs|dead_letter_jobs)_' "
            "GROUP BY n.nspname").fetchall())
        # Every function of the schema of its own runs with its search_path; an install in
        # public is left as it was (a pinned function switches search_path at every call).
        assert pinned == {"other": True, "public": False}
        assert scalar(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'other'::regnamespace") >= 15


def test_a_trigger_fired_by_an_application_session_counts_in_its_own_schema(two_installs):
    # The application's session resolves names through public, where the other install's
    # counters also exist: the trigger on other.jobs must still count in other.
    with psycopg.connect(two_installs, autocommit=True) as app:
        app.execute("INSERT INTO other.jobs (type, queue) VALUES ('noop', 'default')")
        counted = "SELECT coalesce(sum(n), 0) FROM {}.job_counters WHERE name = 'pending'"
        assert scalar(app, counted.format("other")) == 1
        assert scalar(app, counted.format("public")) == 0


def test_enqueue_on_an_applications_connection_uses_jobqs_schema_and_gives_the_path_back(
    two_installs, monkeypatch
):
    monkeypatch.setenv("JOBQ_SCHEMA", OTHER)
    monkeypatch.setenv("DATABASE_URL", two_installs)
    settings.reset()
    try:
        with psycopg.connect(two_installs) as app:
            job = jobq.enqueue("noop", conn=app)
            assert scalar(app, "SHOW search_path") == '"$user", public'
            app.commit()
        with psycopg.connect(two_installs, autocommit=True) as conn:
            assert status(conn, OTHER, job.id) == "pending"
            assert status(conn, "public", job.id) is None
    finally:
        close_default_pool()


def test_two_installs_side_by_side_each_with_its_workers(two_installs, daemon, tmp_path):
    public = daemon(1, url=two_installs, **NO_POLL)
    other = daemon(1, url=two_installs, JOBQ_SCHEMA=OTHER, **NO_POLL)
    other_namespace = settings.schema_namespace(OTHER)
    with psycopg.connect(two_installs, autocommit=True) as conn:
        for namespace in (settings.DEFAULT_ADVISORY_NAMESPACE, other_namespace):
            leader = locks.key(namespace, locks.MAINTENANCE_LEADER)
            wait_for(lambda: scalar(conn, LEADER_HELD, leader) == 1, 30, f"a leader in namespace {namespace}")
        for schema in ("public", OTHER):
            wait_for(lambda: scalar(conn, f"SELECT count(*) FROM {schema}.workers") >= 1, 30, f"{schema}'s worker")
        # Each install's wake-ups on its own channel only.
        ear = psycopg.connect(two_installs, autocommit=True)
        ear.execute('LISTEN "jobq.other"')
        first = conn.execute("INSERT INTO public.jobs (type) VALUES ('noop') RETURNING id").fetchone()[0]
        second = conn.execute("INSERT INTO other.jobs (type) VALUES ('noop') RETURNING id").fetchone()[0]
        heard = [n.payload for n in ear.notifies(timeout=1, stop_after=2)]
        ear.close()
        assert heard == ["default 1"]  # the other install's insert; public's went to 'jobq'
        assert first == second == 1  # a sequence each
        for schema, job_id in (("public", first), (OTHER, second)):
            wait_for(lambda: status(conn, schema, job_id) == "done", 20, f"{schema}'s job done, woken")
        # Each ran its own job only: one done job per install, one claim per worker.
        for schema in ("public", OTHER):
            assert scalar(conn, f"SELECT count(*) FROM {schema}.jobs") == 1
    assert "Traceback" not in public.log() + other.log()
