"""The throwaway PostgreSQL every queue test runs against, and per-test clean tables.

Where the database comes from, in order:
1. ``JOBQ_TEST_DATABASE_URL`` when set (its tables are truncated: use a throwaway one);
2. a testcontainers ``postgres:16`` container, when a Docker engine answers;
3. an embedded PostgreSQL 16 from the ``pgserver`` wheel, in a temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from datetime import datetime, timedelta, timezone
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo, sql

from jobq.store import connections
from jobq.store.embedded import EmbeddedPostgres
from jobq.store.migrate import migrate
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE

pytest_plugins = ["api_support"]  # the API tests' fixtures

# Speed over durability for a database that is thrown away after the run.
TEST_SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}
# TRUNCATE fires no DELETE trigger: the dead-letter groups, kept by triggers, go with
# their letters.
TABLES = (
    "jobs", "dead_letter_jobs", "job_counters", "job_counter_samples", "workers", "jobq_queues",
    "jobq_dead_letter_groups", "jobq_operations", "jobq_audit", "jobq_schedules", "jobq_minutes", "job_idempotency_keys",
)
TRUNCATE = sql.SQL("TRUNCATE {} RESTART IDENTITY").format(sql.SQL(", ").join(map(sql.Identifier, TABLES)))


def docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:  # no engine, no permission, no SDK: use the embedded server
        return False


@contextlib.contextmanager
def throwaway_database(base_dir: Path) -> Iterator[str]:
    url = os.environ.get("JOBQ_TEST_DATABASE_URL")
    if url:
        yield url
    elif docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16", driver=None) as container:
            yield container.get_connection_url()
    else:
        server = EmbeddedPostgres(base_dir, settings=TEST_SERVER_SETTINGS)
        server.start()
        try:
            yield server.url()
        finally:
            server.delete()


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated, throwaway database for the whole run."""
    with throwaway_database(tmp_path_factory.mktemp("pg")) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        yield url
        connections.close_default_pool()


@pytest.fixture
def empty_database(database_url: str) -> Iterator[str]:
    """The URL of a database of its own, with nothing in it (dropped after the test)."""
    name = f"jobq_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield conninfo.make_conninfo(database_url, dbname=name)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def conn(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[psycopg.Connection]:
    """An autocommit connection to empty tables; DATABASE_URL points at the same database."""
    monkeypatch.setenv("DATABASE_URL", database_url)
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(TRUNCATE)
        yield connection
    connections.close_default_pool()


@pytest.fixture
def no_partitions(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """``conn``, with no range partition of finished jobs (every finished job lands in
    jobs_finished_default) before the test and none left after it: the tests that make
    partitions of their own, or that need jobs finished long ago to be in the default
    partition (a daemon's leader makes the day's partitions in this shared database)."""
    from jobq.store import partitions

    far = datetime.now(timezone.utc) + timedelta(days=3650)
    partitions.drop_before(conn, far)
    yield conn
    conn.execute(TRUNCATE)
    partitions.drop_before(conn, far)


@pytest.fixture
def ledger(conn: psycopg.Connection) -> psycopg.Connection:
    """An empty test_ledger table (see handlers_for_tests)."""
    from handlers_for_tests import LEDGER_CREATE

    conn.execute(LEDGER_CREATE)
    conn.execute("TRUNCATE test_ledger")
    return conn


@pytest.fixture
def daemon(database_url: str, tmp_path: Path, conn: psycopg.Connection) -> Iterator:
    """Start real `jobq worker` processes: ``daemon(concurrency=2, url=None, **env)``.
    Every one is stopped (and its process group killed) after the test."""
    from daemon import Daemon

    started: list[Daemon] = []

    def start(concurrency: int = 2, *args: str, url: str | None = None, **env: str) -> Daemon:
        process = Daemon(url or database_url, tmp_path / f"daemon{len(started)}.log", concurrency, **env)
        started.append(process)
        return process.start(*args)

    yield start
    for process in started:
        process.stop()


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


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL instance of the test's own (migrated), which the test may stop and start."""
    with migrated_instance(tmp_path / "own-pg") as server:
        yield server
