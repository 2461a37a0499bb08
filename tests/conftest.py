"""The fixtures every test module may use: a database of the test process's own with
clean tables per test, real daemons, apps over that database, instances of a test's own.

The suite runs in parallel (pytest-xdist, ``make test``); each test process (xdist
worker) has its own PostgreSQL database, cloned from a migrated template, on a server of
its own (embedded, or a container) or on the server ``JOBQ_TEST_DATABASE_URL`` gives:
see support/db.py. Helpers that are not fixtures live in tests/support/.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from psycopg import conninfo, sql

from jobq.settings import Settings
from jobq.store import connections
from jobq.store.embedded import EmbeddedPostgres
from support import db, netns
from support.daemon import Daemon
from web.app import create_app
from web.context import api

RUN = pytest.StashKey[str]()  # this run's id, in the names of its databases
WORKER_INPUT = "jobq_test_run"


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    config.stash[RUN] = workerinput[WORKER_INPUT] if workerinput else uuid.uuid4().hex[:8]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(xdist, in the controller) Each worker gets the run's id."""
    node.workerinput[WORKER_INPUT] = node.config.stash[RUN]


# The long fault scenarios (tens of seconds each) go first: handed out last, a few of
# them kept one process busy while the others had finished. --dist load keeps the order,
# and with --maxschedchunk 1 (the Makefile) hands them out one at a time, each to a free
# process (in chunks, the first held them all).
LONG_FIRST = ("hosts", "chaos")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every process collects the same order: the long scenarios, then the rest as found."""
    items.sort(key=lambda item: not any(item.get_closest_marker(name) for name in LONG_FIRST))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In the controller (or the one process with ``-n 0``), once every worker is done:
    what the run left on a given server goes, and any embedded server still running in
    the run's temporary directory is stopped (a worker that crashed left its own)."""
    if hasattr(session.config, "workerinput"):
        return
    url = os.environ.get(db.URL_VARIABLE)
    if url:
        db.drop_run_databases(url, session.config.stash[RUN])
    factory = getattr(session.config, "_tmp_path_factory", None)  # what xdist gives its workers, too
    if factory is not None:
        db.stop_left_servers(factory.getbasetemp())


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The maintenance database of this test process's server (see support/db.py)."""
    with db.throwaway_server(tmp_path_factory.mktemp("pg")) as url:
        yield url


@pytest.fixture(scope="session")
def database_url(server_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """This test process's migrated database, for the whole run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with db.own_database(server_url, request.config.stash[RUN], worker) as url:
        yield url
        connections.close_default_pool()


@pytest.fixture
def empty_database(database_url: str) -> Iterator[str]:
    """The URL of a database of its own, with nothing in it (dropped after the test)."""
    name = f"{conninfo.conninfo_to_dict(database_url)['dbname']}_{uuid.uuid4().hex[:8]}"  # the run's prefix
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield db.on(database_url, name)
    db.drop(database_url, name)


@pytest.fixture
def migrated_database(server_url: str, database_url: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The URL of a migrated database of its own, cloned from the run's template (made
    with this process's database) and dropped after the test: for what changes more
    than the tables (a benchmark's partitions, limits and settings). None when the
    server's role may not create databases (JOBQ_TEST_DATABASE_URL's, serially)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(db.own_database(server_url, request.config.stash[RUN], f"{worker}_{uuid.uuid4().hex[:8]}"))
        except RuntimeError:
            url = None
        yield url


@pytest.fixture
def conn(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[psycopg.Connection]:
    """An autocommit connection to empty tables; DATABASE_URL points at the same database."""
    monkeypatch.setenv("DATABASE_URL", database_url)
    connections.close_default_pool()  # settings an earlier test read without DATABASE_URL go too
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(db.TRUNCATE)
        yield connection
    connections.close_default_pool()


@pytest.fixture
def two_sessions(database_url: str) -> Iterator[tuple[psycopg.Connection, psycopg.Connection]]:
    """Two autocommit sessions of their own, each a worker holding what it claims (its
    advisory locks are the jobs it holds)."""
    with psycopg.connect(database_url, autocommit=True) as a, psycopg.connect(database_url, autocommit=True) as b:
        yield a, b


@pytest.fixture
def no_partitions(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """``conn``, with no range partition of finished jobs (every finished job lands in
    jobs_finished_default) before the test and none left after it: the tests that make
    partitions of their own, or that need jobs finished long ago to be in the default
    partition (a daemon's leader makes the day's partitions in the test database)."""
    from jobq.store import partitions

    far = datetime.now(timezone.utc) + timedelta(days=3650)
    partitions.drop_before(conn, far)
    yield conn
    conn.execute(db.TRUNCATE)
    partitions.drop_before(conn, far)


@pytest.fixture
def ledger(conn: psycopg.Connection) -> psycopg.Connection:
    """An empty test_ledger table (see support/handlers.py)."""
    from support.handlers import LEDGER_CREATE

    conn.execute(LEDGER_CREATE)
    conn.execute("TRUNCATE test_ledger")
    return conn


@pytest.fixture
def control(conn: psycopg.Connection) -> psycopg.Connection:
    """``conn``: the operator actions' tests' name for it (the operations, the audit trail
    and the dead-letter groups are among the tables it empties)."""
    return conn


@pytest.fixture
def daemon(database_url: str, tmp_path: Path, conn: psycopg.Connection) -> Iterator:
    """Start real `jobq worker` processes: ``daemon(concurrency=2, url=None, **env)``.
    Every one is stopped (and its process group killed) after the test."""
    started: list[Daemon] = []

    def start(concurrency: int = 2, *args: str, url: str | None = None, **env: str) -> Daemon:
        process = Daemon(url or database_url, tmp_path / f"daemon{len(started)}.log", concurrency, **env)
        started.append(process)
        return process.start(*args)

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL instance of the test's own (migrated), which the test may stop and start."""
    with db.migrated_instance(tmp_path / "own-pg") as server:
        yield server


@pytest.fixture
def make_app(conn: psycopg.Connection, database_url: str) -> Iterator:
    """Build apps over the (emptied) test database; settings from keyword arguments
    only, never from the environment. Their pools are closed after the test."""
    apps: list[Flask] = []

    def make(**settings: Any) -> Flask:
        app = create_app(Settings.from_env({}, **{"database_url": database_url, **settings}))
        apps.append(app)
        return app

    yield make
    for app in apps:
        with app.app_context():
            api().database.close()


@pytest.fixture
def client(make_app: Any) -> FlaskClient:
    """A test client of an app with default settings (no token, no admission limit)."""
    return make_app().test_client()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[netns.Cluster]:
    """Three hosts for real (support.netns): PostgreSQL in a network namespace of its own,
    each host a namespace of its own; the test starts their supervisors. Fails, saying
    why, without root or iproute2."""
    netns.require()
    made = netns.Cluster(tmp_path, hosts=3)
    try:
        made.up()
        yield made
    finally:
        made.down()
