"""Upgrading a database of schema 12 (one jobs table) to schema 13's partitioned layout:
an explicit step (``jobq migrate --partition``) that the release phase's ``jobq
migrate`` refuses, and code of this release refuses to run before it; a million jobs
converted with nothing lost."""

from __future__ import annotations

import time

import psycopg
import pytest

import jobq
from jobq.store.sql.counters import COUNTER_LIST
from jobq.errors import ConversionNeeded
from jobq.store.migrate import check_schema, migrate, required_version
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
from support.cli import run_cli
from support.rows import WRITTEN, insert_jobs, per_row

pytestmark = [pytest.mark.db, pytest.mark.scale]

JOBS = 1_000_000


def fill(conn: psycopg.Connection) -> None:
    """A million jobs of schema 12, in every status jobq writes, one in a thousand with a key
    of one of the three scopes (each key held by its job now: 'pending' keys on pending
    jobs only); claimed, started and finished as the row factory has them, finished over
    the last 100 minutes."""
    insert_jobs(
        conn, JOBS, per_row("({}::text[])[1 + i % 6]", list(WRITTEN)), type="noop", queue=per_row("'q' || (i % 3)"),
        payload=per_row("jsonb_build_object('n', i)"), attempt=0, run_at=per_row("now() - interval '1 hour'"),
        completed_at=per_row("CASE WHEN status IN ('done', 'dead', 'cancelled') THEN now() - (i % 100) * interval '1 minute' END"),
        idempotency_key=per_row("CASE WHEN i % 1000 = 0 THEN 'key-' || i END"),
        unique_while=per_row(
            "CASE WHEN i % 1000 = 0 AND status = 'pending' AND i % 3000 = 0 THEN 'pending' "
            "WHEN i % 1000 = 0 AND status IN ('pending', 'claimed', 'running') AND i % 2000 = 0 THEN 'active' "
            "ELSE 'always' END"
        ),
        tags=per_row("CASE WHEN i % 10 = 0 THEN ARRAY['t' || (i % 7)] END"),
    )


SUMMARY = (
    "SELECT status, count(*), sum(id), count(idempotency_key), count(tags), sum((payload->>'n')::bigint) "
    "FROM jobs GROUP BY status ORDER BY status"
)


def test_migrate_partition_converts_a_million_jobs_with_nothing_lost(empty_database):
    url = empty_database
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE, upto=12)
        fill(conn)
        before = conn.execute(SUMMARY).fetchall()
        counters = sorted(conn.execute(COUNTER_LIST).fetchall())
        always_keys = conn.execute(
            "SELECT count(*) FROM jobs WHERE idempotency_key IS NOT NULL AND unique_while = 'always'"
        ).fetchone()[0]
        (last_id,) = conn.execute("SELECT max(id) FROM jobs").fetchone()

        refused = run_cli("migrate", DATABASE_URL=url)  # the release phase's command
        assert refused.returncode == 1
        assert "jobq migrate --partition" in refused.stderr and "partitioned layout" in refused.stderr
        with pytest.raises(ConversionNeeded, match="--partition"):
            check_schema(conn)  # a worker of this release would not start

        started = time.monotonic()
        converted = run_cli("migrate", "--partition", DATABASE_URL=url)
        took = time.monotonic() - started
        assert converted.returncode == 0, converted.stderr
        assert "0013_partitioned_jobs" in converted.stdout
        print(f"converted {JOBS:,} jobs in {took:.1f} s")

        assert check_schema(conn) == required_version()
        assert conn.execute(SUMMARY).fetchall() == before
        assert sorted(conn.execute(COUNTER_LIST).fetchall()) == counters
        live = conn.execute("SELECT count(*) FROM jobs_live").fetchone()[0]
        assert live == sum(row[1] for row in before if row[0] in ("pending", "claimed", "running"))
        assert conn.execute("SELECT count(*) FROM job_idempotency_keys").fetchone()[0] == always_keys
        assert jobq.enqueue("noop", conn=conn).id > last_id  # the sequence goes on past every id
        held = conn.execute(
            "SELECT id, idempotency_key FROM jobs WHERE status IN ('done', 'dead', 'cancelled') AND idempotency_key IS NOT NULL "
            "LIMIT 1"
        ).fetchone()
        assert jobq.enqueue("noop", idempotency_key=held[1], conn=conn).id == held[0]  # its key still held
        assert run_cli("migrate", DATABASE_URL=url).returncode == 0  # nothing left to do
