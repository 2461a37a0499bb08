"""Schema migrations: numbered SQL files shipped in ``jobq/store/migrations``.

``migrate`` applies the files the database has not seen, in order, each in its own
transaction, under a reserved advisory lock, and records them in
``jobq_migrations``; two at once apply each file once, and a second run does
nothing. It refuses a database whose schema is newer than this code. Running
processes only call :func:`check_schema`, which accepts any schema at least as new
as the code needs (migrations only add), so a rolling deploy can migrate first.

One migration rewrites a table instead of adding to it: schema 13 converts jobs to
the partitioned layout (:data:`CONVERSIONS`). ``migrate`` applies it where jobs is
empty (a new install), and otherwise only when asked (``jobq migrate --partition``,
outside the release phase: writes to jobs wait while it copies them); until then it
stops before it, and :func:`check_schema` tells the processes of this code what to run.

Numbers may have gaps (a number reserved for a change developed in parallel): what
the database has seen is the set of versions recorded, not the highest one, so a file
whose number is below one already applied is still applied when it arrives, and a
database without it is too old for the code that ships it.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from importlib import resources

from psycopg import sql

from jobq.store.sql.migrations import (
    JOB_EXISTS_ANY,
    MIGRATION_FUNCTIONS_PIN,
    MIGRATION_FUNCTIONS_PIN_EXISTS,
    MIGRATION_GET_VERSION,
    MIGRATION_LIST_VERSIONS,
    MIGRATION_LOCK,
    MIGRATION_RECORD,
    MIGRATION_TABLE_EXISTS,
    MIGRATION_UNLOCK,
)
from jobq.store import locks
from jobq.store.give_way import GAVE_WAY, giving_way
from jobq.store.connections import Connection
from jobq.errors import ConversionNeeded, MigrationBlocked, SchemaTooNew, SchemaTooOld

log = logging.getLogger(__name__)

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

# The one piece of DDL outside jobq/store/migrations (convention 1's one exception): the
# table that records migrations cannot be created by a migration, since applying one
# means reading and writing that table. IF NOT EXISTS makes a second run a no-op, and
# MIGRATION_LOCK keeps two first runs from racing. The statements that read and write
# the table are in jobq.store.sql.migrations.
MIGRATIONS_TABLE_CREATE = (
    "CREATE TABLE IF NOT EXISTS jobq_migrations ("
    "version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
)


# The other DDL outside the files: the schema of JOBQ_SCHEMA, which the migrations create
# their objects in (each of them spells names unqualified, through the search_path), so
# it exists before the first of them.
SCHEMA_CREATE = sql.SQL("CREATE SCHEMA IF NOT EXISTS {}")
SEARCH_PATH_SET = sql.SQL("SET search_path = {}")

# The migrations that rewrite jobs (version: the statement that says whether jobs holds
# a row), and the option of `jobq migrate` that allows them on a table that does.
CONVERSIONS = {13: JOB_EXISTS_ANY}
CONVERSION_OPTION = "--partition"


# A file's DDL waits at most LOCK_WAIT_MS for each lock. PostgreSQL grants a table's
# locks in the order they were asked for, so DDL waiting behind a long transaction on
# jobs (an ALTER, a trigger or an index made there) would hold every worker's claim and
# every enqueue in line behind its own request, for as long as that transaction lasts,
# in the release phase of a rolling deploy. It gives way instead: the file's transaction
# rolls back, and is tried again RETRY_PAUSE seconds later, for up to GIVE_UP seconds
# (then MigrationBlocked). A deadlock with a worker's statement (DDL on the partitioned
# jobs locks it, then each partition; a statement may take them the other way round)
# ends the same way. A conversion (CONVERSIONS) waits as long as it needs: it is run on
# purpose, with the workers stopped.
LOCK_WAIT_MS = 1000
RETRY_PAUSE = 1.0
GIVE_UP = 600.0


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str = field(repr=False)


def available() -> list[Migration]:
    """The migrations shipped with this code, in order."""
    return list(_shipped())


@functools.cache
def _shipped() -> tuple[Migration, ...]:
    """The migration files, read once per process: the supervisor reads them before it
    forks (:meth:`jobq.daemon.supervisor.Supervisor.run`), so that a worker's schema check
    at boot reads none of the files again (2-3 ms of CPU a worker)."""
    found = []
    for entry in resources.files("jobq.store.migrations").iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if not versions or versions[0] != 1 or len(set(versions)) != len(versions):
        raise RuntimeError(f"migration files must be numbered from 1, each number once, found {versions}")
    return tuple(found)


def required_version() -> int:
    """The schema version this code needs: its newest migration."""
    return available()[-1].version


def applied_version(conn: Connection) -> int:
    """The newest migration recorded in the database (0 for an empty database)."""
    (exists,) = conn.execute(MIGRATION_TABLE_EXISTS).fetchone()  # type: ignore[misc]
    if not exists:
        return 0
    return int(conn.execute(MIGRATION_GET_VERSION).fetchone()[0])  # type: ignore[index]


def applied_versions(conn: Connection) -> set[int]:
    """Every migration recorded in the database (none for an empty database)."""
    (exists,) = conn.execute(MIGRATION_TABLE_EXISTS).fetchone()  # type: ignore[misc]
    if not exists:
        return set()
    return {int(version) for (version,) in conn.execute(MIGRATION_LIST_VERSIONS)}


def check_schema(conn: Connection) -> int:
    """Raise :class:`SchemaTooOld` unless the database has at least the schema this code
    needs (every migration it ships); return the applied version (newer is fine)."""
    applied = applied_versions(conn)
    needed = required_version()
    missing = [m.version for m in available() if m.version not in applied]
    if missing:
        if min(missing) in CONVERSIONS:
            raise ConversionNeeded(min(missing), CONVERSION_OPTION)
        raise SchemaTooOld(min(missing) - 1, needed)  # complete up to the first one missing
    return max(applied)


def migrate(
    conn: Connection, *, namespace: int, schema: str | None = None, convert: bool = False, upto: int | None = None
) -> list[Migration]:
    """Apply what is missing and return it. ``conn`` must be in autocommit mode.

    ``schema`` (JOBQ_SCHEMA): created if missing and made ``conn``'s search_path, so that
    every object lands there (None: the connection's own search_path, as before). After
    the files, every jobq function gets its own search_path (schema 18 on).

    A conversion (:data:`CONVERSIONS`) of a table holding rows is applied only if
    ``convert``; otherwise the migrations before it are applied and
    :class:`ConversionNeeded` is raised. Raises :class:`SchemaTooNew` when the database
    has migrations this code does not know. Blocks while another ``migrate`` holds the
    lock, then finds its work done. ``upto``: stop after that version (a database of an
    earlier release, for tests of an upgrade).
    """
    if not conn.autocommit:
        raise ValueError("migrate needs an autocommit connection: each file is its own transaction")
    key = locks.key(namespace, locks.MIGRATIONS)
    known = available()
    conn.execute(MIGRATION_LOCK, {"key": key})
    try:
        if schema is not None:
            conn.execute(SCHEMA_CREATE.format(sql.Identifier(schema)))
            conn.execute(SEARCH_PATH_SET.format(sql.Identifier(schema)))
        conn.execute(MIGRATIONS_TABLE_CREATE)
        applied = applied_versions(conn)
        if max(applied, default=0) > known[-1].version:
            raise SchemaTooNew(max(applied), known[-1].version)
        done = []
        for migration in (m for m in known if m.version not in applied and (upto is None or m.version <= upto)):
            if migration.version in CONVERSIONS and not convert:
                (holds_rows,) = conn.execute(CONVERSIONS[migration.version]).fetchone()  # type: ignore[misc]
                if holds_rows:
                    raise ConversionNeeded(migration.version, CONVERSION_OPTION)
            _apply(conn, migration)
            log.info("migration applied version=%s name=%s", migration.version, migration.name)
            done.append(migration)
        (pins,) = conn.execute(MIGRATION_FUNCTIONS_PIN_EXISTS).fetchone()  # type: ignore[misc]
        if done and pins:
            conn.execute(MIGRATION_FUNCTIONS_PIN)
        return done
    finally:
        conn.execute(MIGRATION_UNLOCK, {"key": key})


def _apply(conn: Connection, migration: Migration) -> None:
    """One file and its record in one transaction, giving way to the transactions that
    hold its locks (LOCK_WAIT_MS, RETRY_PAUSE, GIVE_UP)."""

    def apply() -> None:
        conn.execute(migration.sql)
        conn.execute(MIGRATION_RECORD, {"version": migration.version, "name": migration.name})

    def report(exc: Exception) -> None:
        log.warning("migration gave way version=%s name=%s: %s; trying again in %g s",
                    migration.version, migration.name, str(exc).splitlines()[0], RETRY_PAUSE)

    wait_ms = None if migration.version in CONVERSIONS else LOCK_WAIT_MS
    try:
        giving_way(conn, apply, wait_ms=wait_ms, pause=RETRY_PAUSE, within=GIVE_UP, on_giving_way=report)
    except GAVE_WAY as exc:
        raise MigrationBlocked(migration.version, migration.name, GIVE_UP) from exc
