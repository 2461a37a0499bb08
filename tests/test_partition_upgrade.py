"""Upgrading a database of schema 12 (one jobs table) to schema 13's partitioned layout:
an explicit step (``jobq migrate --partition``) that the release phase's ``jobq
migrate`` refuses, and code of this release refuses to run before it; a million jobs
converted with nothing lost."""

from __future__ import annotations

import time

import psycopg
import pytest

import jobq
from jobq import queries
from jobq.errors import ConversionNeeded
from jobq.store.migrate import check_schema, migrate
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE
from support.cli import run_cli

pytestmark = [pytest.mark.db, pytest.mark.scale]

JOBS = 1_000_000
STATUSES = ("pending", "claimed", "running", "done", "dead", "cancelled")

# A million jobs of schema 12, in every status, one in a thousand with a key of one of
# the three scopes (each key held by its job now: 'pending' keys on pending jobs only).
FILL = """
INSERT INTO jobs (type, queue, payload, status, attempt, run_at, claimed_at, heartbeat_at, started_at,
                  completed_at, worker_id, lease, idempotency_key, unique_while, tags)
SELECT 'noop', 'q' || (g %% 3), jsonb_build_object('n', g), s.status, 0, now() - interval '1 hour',
       CASE WHEN s.status <> 'pending' THEN now() END, CASE WHEN s.status <> 'pending' THEN now() END,
       CASE WHEN s.status NOT IN ('pending', 'claimed') THEN now() END,
       CASE WHEN s.status IN ('done', 'dead', 'cancelled') THEN now() - (g %% 100) * interval '1 minute' END,
       CASE WHEN s.status <> 'pending' THEN 'host:1:w' END, CASE WHEN s.status <> 'pending' THEN g END,
       CASE WHEN g %% 1000 = 0 THEN 'key-' || g END,
       CASE WHEN g %% 1000 = 0 AND s.status = 'pending' AND g %% 3000 = 0 THEN 'pending'
            WHEN g %% 1000 = 0 AND s.status IN ('pending', 'claimed', 'running') AND g %% 2000 = 0 THEN 'active'
            ELSE 'always' END,
       CASE WHEN g %% 10 = 0 THEN ARRAY['t' || (g %% 7)] END
FROM generate_series(1, %(n)s) AS g
CROSS JOIN LATERAL (SELECT (%(statuses)s::text[])[1 + g %% 6] AS status) AS s
"""

SUMMARY = (
    "SELECT status, count(*), sum(id), count(idempotency_key), count(tags), sum((payload->>'n')::bigint) "
    "FROM jobs GROUP BY status ORDER BY status"
)


def test_migrate_partition_converts_a_million_jobs_with_nothing_lost(empty_database):
    url = empty_database
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, namespace=DEFAULT_ADVISORY_NAMESPACE, upto=12)
        conn.execute(FILL, {"n": JOBS, "statuses": list(STATUSES)})
        before = conn.execute(SUMMARY).fetchall()
        counters = sorted(conn.execute(queries.COUNTERS_GET).fetchall())
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

        assert check_schema(conn) == 13
        assert conn.execute(SUMMARY).fetchall() == before
        assert sorted(conn.execute(queries.COUNTERS_GET).fetchall()) == counters
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
