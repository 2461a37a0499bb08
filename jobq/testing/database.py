"""Throwaway PostgreSQL for tests: a server, a migrated template on it, and a database
cloned from the template for each test. What ``jobq_database`` uses, and this repository's
own suite (tests/support/db.py).

Where the server comes from (:func:`throwaway_server`), in order:
1. ``JOBQ_TEST_DATABASE_URL``: a server given (its role needs CREATEDB);
2. a testcontainers ``postgres:16`` container, when a Docker engine answers;
3. an embedded PostgreSQL 16 (the ``pgserver`` wheel) in a temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import conninfo, sql

from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
from jobq.store.embedded import EmbeddedPostgres
from jobq.store.migrate import migrate

URL_VARIABLE = "JOBQ_TEST_DATABASE_URL"
# Speed over durability for servers thrown away after the run.
TEST_SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


def docker_answers() -> bool:
    """Whether a Docker engine answers here (with the docker SDK that testcontainers brings)."""
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:  # no engine, no permission, no SDK: use the embedded server
        return False


@contextlib.contextmanager
def throwaway_server(base_dir: Path) -> Iterator[str]:
    """The URL of a server's maintenance database: the given one, or a container or an
    embedded server of the caller's own (in ``base_dir``), removed at the end."""
    url = os.environ.get(URL_VARIABLE)
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


def on(server_url: str, name: str) -> str:
    """The URL of database ``name`` on the server of ``server_url``."""
    return conninfo.make_conninfo(server_url, dbname=name)


class Databases:
    """Databases cloned from one migrated template on a server (``CREATE DATABASE ...
    TEMPLATE``: tens of milliseconds, a fresh schema each time)."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.prefix = f"jobq_t_{uuid.uuid4().hex[:8]}_"
        self.template = self.prefix + "template"
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.template)))
        with psycopg.connect(on(server_url, self.template), autocommit=True) as conn:
            migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE)
        self.made = 0

    def clone(self) -> str:
        """The URL of a new migrated database."""
        self.made += 1
        name = f"{self.prefix}{self.made}"
        with psycopg.connect(self.server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(self.template)))
        return on(self.server_url, name)

    def drop(self, url: str) -> None:
        """Drop a database :meth:`clone` made (its sessions ended first)."""
        name = conninfo.conninfo_to_dict(url)["dbname"]
        with psycopg.connect(self.server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def close(self) -> None:
        """Drop the template (and so every name this made is gone from the server)."""
        self.drop(on(self.server_url, self.template))
