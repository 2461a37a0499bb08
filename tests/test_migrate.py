import logging
import threading
import time

import psycopg
import pytest

import jobq
from jobq.errors import MigrationBlocked, SchemaTooNew, SchemaTooOld
from jobq.store import migrate as migrate_module
from jobq.store.migrate import Migration, applied_version, available, check_schema, migrate, required_version
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
from support.cli import run_cli

pytestmark = pytest.mark.db


def test_second_migrate_is_a_no_op(empty_database):
    with psycopg.connect(empty_database, autocommit=True) as conn:
        first = migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        second = migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        assert [m.version for m in first] == [m.version for m in available()]
        assert second == []
        assert applied_version(conn) == required_version()


def test_two_concurrent_migrations_apply_each_file_once(empty_database):
    results, errors = [], []
    barrier = threading.Barrier(4)

    def run():
        try:
            with psycopg.connect(empty_database, autocommit=True) as conn:
                barrier.wait()
                results.append(migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE))
        except Exception as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(len(r) for r in results) == [0, 0, 0, len(available())]
    with psycopg.connect(empty_database) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM jobq_migrations ORDER BY version")]
    assert versions == [m.version for m in available()]


def test_migrate_refuses_a_schema_newer_than_the_code(empty_database):
    with psycopg.connect(empty_database, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        conn.execute("INSERT INTO jobq_migrations (version, name) VALUES (9999, 'from_the_future')")
        with pytest.raises(SchemaTooNew):
            migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        # running processes accept a newer schema
        assert check_schema(conn) == 9999


def test_a_file_numbered_below_one_applied_is_applied_when_it_arrives(empty_database, monkeypatch):
    # A number reserved for a change developed in parallel: its file lands after a higher one ran.
    shipped = available()
    top = shipped[-1].version
    later = Migration(top + 2, "later", "CREATE TABLE jobq_test_later ()")
    reserved = Migration(top + 1, "reserved", "CREATE TABLE jobq_test_reserved ()")
    with psycopg.connect(empty_database, autocommit=True) as conn:
        monkeypatch.setattr(migrate_module, "available", lambda: shipped + [later])
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        monkeypatch.setattr(migrate_module, "available", lambda: shipped + [reserved, later])
        with pytest.raises(SchemaTooOld) as refused:  # the code that ships it needs it
            check_schema(conn)
        assert refused.value.applied == top
        assert [m.name for m in migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)] == ["reserved"]
        assert check_schema(conn) == top + 2
        assert conn.execute("SELECT to_regclass('jobq_test_reserved') IS NOT NULL").fetchone()[0]


def ship_an_alter_of_jobs(conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> Migration:
    """Apply the shipped migrations, then ship one more that takes an AccessExclusiveLock
    on jobs (a column added); return it."""
    shipped = available()
    alter = Migration(shipped[-1].version + 1, "test_alter", "ALTER TABLE jobs ADD COLUMN jobq_test_column integer")
    migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
    monkeypatch.setattr(migrate_module, "available", lambda: shipped + [alter])
    return alter


def test_a_migration_behind_a_long_transaction_gives_way_to_the_traffic_on_jobs(empty_database, monkeypatch, caplog):
    monkeypatch.setattr(migrate_module, "LOCK_WAIT_MS", 200)
    monkeypatch.setattr(migrate_module, "RETRY_PAUSE", 0.3)
    applied, reads = [], []
    with psycopg.connect(empty_database, autocommit=True) as conn:
        alter = ship_an_alter_of_jobs(conn, monkeypatch)
        with psycopg.connect(empty_database) as long_transaction, caplog.at_level(logging.WARNING):
            jobq.enqueue("noop", conn=long_transaction)  # not committed: its lock on jobs stays
            runner = threading.Thread(target=lambda: applied.extend(migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)))
            runner.start()
            time.sleep(0.5)  # the migration waiting for its lock, giving way, trying again
            with psycopg.connect(empty_database, autocommit=True) as traffic:
                traffic.execute("SET statement_timeout = '5s'")  # a read queued behind the DDL until the end fails
                for _ in range(10):
                    started = time.monotonic()
                    traffic.execute("SELECT count(*) FROM jobs").fetchone()
                    reads.append(time.monotonic() - started)
                    time.sleep(0.1)
                recorded_meanwhile = traffic.execute(
                    "SELECT count(*) FROM jobq_migrations WHERE version = %s", (alter.version,)).fetchone()[0]
            long_transaction.commit()
            runner.join(30)
        column = conn.execute("SELECT count(*) FROM information_schema.columns "
                              "WHERE table_name = 'jobs' AND column_name = 'jobq_test_column'").fetchone()[0]
    assert max(reads) < 2.0, reads  # each read waited at most one of the DDL's tries (0.2 s), not for the long transaction
    assert recorded_meanwhile == 0 and applied == [alter] and column == 1
    assert "migration gave way version=%d name=test_alter" % alter.version in caplog.text


def test_a_migration_whose_locks_stay_held_stops_with_its_name(empty_database, monkeypatch):
    for name, value in (("LOCK_WAIT_MS", 100), ("RETRY_PAUSE", 0.2), ("GIVE_UP", 1.0)):
        monkeypatch.setattr(migrate_module, name, value)
    with psycopg.connect(empty_database, autocommit=True) as conn:
        alter = ship_an_alter_of_jobs(conn, monkeypatch)
        with psycopg.connect(empty_database) as long_transaction:
            jobq.enqueue("noop", conn=long_transaction)
            with pytest.raises(MigrationBlocked) as blocked:
                migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        assert applied_version(conn) == alter.version - 1  # nothing of it applied
    assert str(blocked.value).startswith(f"migration {alter.version:04d}_test_alter could not take its locks in 1 s")


def test_running_processes_refuse_a_schema_older_than_they_need(empty_database):
    with psycopg.connect(empty_database, autocommit=True) as conn:
        with pytest.raises(SchemaTooOld):
            check_schema(conn)


def test_cli_migrate_applies_then_reports_nothing_to_do(empty_database):
    first = run_cli("migrate", DATABASE_URL=empty_database)
    second = run_cli("migrate", DATABASE_URL=empty_database)
    assert first.returncode == 0, first.stderr
    assert "applied" in first.stdout
    assert second.returncode == 0 and "nothing to do" in second.stdout


def test_cli_migrate_without_a_reachable_database_fails_in_one_line():
    result = run_cli("migrate", "--wait", "0", DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("jobq: ") and "database unavailable" in lines[-1]
    assert "Traceback" not in result.stderr


def test_cli_without_database_url_names_the_variable():
    result = run_cli("migrate")
    assert result.returncode == 2  # a configuration error, like a usage error
    assert result.stderr.strip() == "jobq: DATABASE_URL: is not set; point it at your PostgreSQL database (or run make run, jobq dev, in this checkout)"


def test_every_function_that_turns_a_plan_type_off_turns_jit_off(conn):
    """A plan left only a path turned off is costed ten billion, above jit_above_cost: on a
    server built with LLVM each call would compile it (200-1,100 ms a statement measured on
    PostgreSQL 15, schema 33). Read from the catalog of the migrated schema."""
    settings = dict(conn.execute(
        "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc AS p "
        "WHERE p.pronamespace = current_schema()::regnamespace AND p.proconfig IS NOT NULL").fetchall())
    turning_off = {name: config for name, config in settings.items() if any(
        c.startswith("enable_") and c.endswith("=off") for c in config)}
    assert "jobq_claim_limited(text[],text,integer,integer,bigint)" in turning_off
    assert {name: config for name, config in turning_off.items() if "jit=off" not in config} == {}
