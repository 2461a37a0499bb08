"""The test databases: a server for each test process, or one given for all of them; on
it one migrated template per run, cloned into a database of each test process's own; and
reading the server's shared views for this database only.

Where the server comes from (:func:`jobq.testing.database.throwaway_server`, which
users' tests have through the ``jobq_database`` fixture too), in order:
1. ``JOBQ_TEST_DATABASE_URL``: a server given, shared by every test process of the run
   (and by other runs: every name carries the run's id). Its role needs CREATEDB; without
   it a serial run (``-n 0``) uses the given database itself, as before databases per
   process;
2. a testcontainers ``postgres:16`` container of the test process's own, when a Docker
   engine answers;
3. an embedded PostgreSQL 16 (the ``pgserver`` wheel) of the test process's own, in its
   temporary directory.

A test process is an xdist worker (``gw0``, ``gw1``, ...) or, with ``-n 0``, the one
pytest process (``main``). Its database, ``jobq_test_<run>_<worker>``, is cloned
(``CREATE DATABASE ... TEMPLATE``) from ``jobq_test_<run>_template``, which the first
process to need it migrates under an advisory lock on the server.

pg_stat_activity and pg_locks show every database of the server, so a test that reads
them for its own sessions filters by its database (``datname = current_database()``;
advisory locks: :data:`THIS_DATABASE_LOCKS`). Advisory locks themselves are per database:
two databases' workers never block each other, but the view shows both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql

from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
from jobq.store import locks
from jobq.store.embedded import EmbeddedPostgres
from jobq.store.give_way import giving_way
from jobq.store.migrate import migrate
from jobq.testing.database import TEST_SERVER_SETTINGS, URL_VARIABLE, on, throwaway_server  # noqa: F401  (re-exported)

# TRUNCATE fires no DELETE trigger: the dead-letter groups, kept by triggers, go with
# their letters.
TABLES = (
    "jobs", "dead_letter_jobs", "job_counters", "job_counter_samples", "workers", "jobq_queues",
    "jobq_dead_letter_groups", "jobq_operations", "jobq_audit", "jobq_schedules", "jobq_minutes", "job_idempotency_keys",
    "jobq_workflows", "jobq_workflow_steps", "jobq_workflow_edges",
    "jobq_limits", "jobq_limit_slots", "jobq_limit_starts",
)
TRUNCATE = sql.SQL("TRUNCATE {} RESTART IDENTITY").format(sql.SQL(", ").join(map(sql.Identifier, TABLES)))

# Held (on the server's maintenance database) while the run's template is made and cloned.
TEMPLATE_LOCK = "SELECT pg_advisory_lock(hashtext('jobq test template'))"
TEMPLATE_UNLOCK = "SELECT pg_advisory_unlock(hashtext('jobq test template'))"

# pg_locks' rows of this database (an advisory lock's row names its database).
THIS_DATABASE_LOCKS = "database = (SELECT oid FROM pg_database WHERE datname = current_database())"
# Advisory locks as pg_locks shows them: the 64-bit key split into classid (high 32
# bits) and objid (low 32 bits), objsubid 1 for the one-bigint form.
JOBQ_ADVISORY_LOCKS = (
    "SELECT ((classid::bigint << 32) | objid::bigint) & %(mask)s, pid FROM pg_locks "
    "WHERE locktype = 'advisory' AND objsubid = 1 AND granted "
    f"AND (classid::bigint >> 16) = %(namespace)s AND {THIS_DATABASE_LOCKS}"
)


def database_name(run: str, worker: str) -> str:
    return f"jobq_test_{run}_{worker}"


@contextlib.contextmanager
def own_database(server_url: str, run: str, worker: str) -> Iterator[str]:
    """The URL of this test process's migrated database (dropped at the end)."""
    name = database_name(run, worker)
    if not _cloned(server_url, name, database_name(run, "template")):
        if worker != "main":
            raise RuntimeError(
                f"{URL_VARIABLE}'s role may not create databases, which each test process needs: "
                "grant it CREATEDB, or run the tests serially (-n 0) on that one database"
            )
        with psycopg.connect(server_url, autocommit=True) as conn:  # serial: the given database itself
            migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        yield server_url
        return
    try:
        yield on(server_url, name)
    finally:
        drop(server_url, name)


def _cloned(server_url: str, name: str, template: str) -> bool:
    """Database ``name`` made from ``template``, which is made and migrated first if no
    test process has yet; False if the server's role may not create databases."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(TEMPLATE_LOCK)
        try:
            if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (template,)).fetchone():
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(template)))
                with psycopg.connect(on(server_url, template), autocommit=True) as conn:
                    migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
        except psycopg.errors.InsufficientPrivilege:
            return False
        finally:
            admin.execute(TEMPLATE_UNLOCK)
    return True


def drop(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def drop_run_databases(server_url: str, run: str) -> None:
    """Drop what the run ``run`` left on a shared server: its template, and the database of
    any test process that died before it could drop its own."""
    with psycopg.connect(server_url, autocommit=True) as admin:
        names = [name for (name,) in admin.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", (database_name(run, ""),))]
    for name in names:
        drop(server_url, name)


def stop_left_servers(root: Path) -> None:
    """Stop every embedded server still running below ``root``."""
    for pid_file in root.glob("**/data/postmaster.pid"):
        EmbeddedPostgres(pid_file.parent.parent).stop(mode="immediate")


@contextlib.contextmanager
def migrated_instance(data_dir: Path, port: int | None = None, **settings: str) -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL of the caller's own, migrated, with TEST_SERVER_SETTINGS
    changed by ``settings`` (and on 127.0.0.1:``port`` too, if given); deleted at the end."""
    server = EmbeddedPostgres(data_dir, port=port, settings={**TEST_SERVER_SETTINGS, **settings})
    server.start()
    with psycopg.connect(server.url(), autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
    try:
        yield server
    finally:
        server.delete()


def alter_beside_traffic(conn: psycopg.Connection, statement: str, within: float = 30.0) -> None:
    """Run DDL on tables a live daemon uses (``conn`` in autocommit). DDL on the
    partitioned ``jobs`` locks it and then each partition; a daemon's statement may lock
    them in the other order, a deadlock the server breaks after a second by aborting
    either side. Each try here waits at most 100 ms for a lock and then gives way, so the
    DDL is the side that yields, and tries again until ``within`` seconds have passed."""
    giving_way(conn, lambda: conn.execute(statement), wait_ms=100, pause=0.05, within=within)


def rows_read(conn: psycopg.Connection, relation: str = "jobs_live") -> int:
    """The rows of ``relation`` this transaction has read so far: by sequential scans,
    and fetched through its indexes (pg_stat_xact_user_tables, PostgreSQL's own count).
    Call it before and after a statement, in one transaction, for what the statement
    read."""
    return conn.execute(
        "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::bigint FROM pg_stat_xact_user_tables "
        "WHERE relname = %s", (relation,)).fetchone()[0]


def scalar(conn: psycopg.Connection, query: str, *params: object) -> object:
    """The first column of the first row, or None without a row."""
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def advisory_locks(conn: psycopg.Connection) -> dict[int, int]:
    """The jobq advisory locks held in this database: {value (a job id): backend pid}."""
    rows = conn.execute(
        JOBQ_ADVISORY_LOCKS, {"mask": locks.ID_MASK, "namespace": DEFAULT_ADVISORY_NAMESPACE}
    ).fetchall()
    return {value: pid for value, pid in rows}
