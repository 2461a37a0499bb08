"""What the tests of operator actions share: emptied control tables, and jobs seeded by
SQL in the states a test needs (fast: no worker runs them)."""

from __future__ import annotations

import psycopg
import pytest

# The tables of schema 5 that conftest's `conn` does not empty.
CONTROL_TABLES = "jobq_operations, jobq_audit, jobq_dead_letter_groups"

SEED_DEAD = (
    "WITH j AS (INSERT INTO jobs (type, queue, payload, status, attempt, max_retries, error, completed_at, tags) "
    "SELECT %(type)s, %(queue)s, jsonb_build_object('i', i), 'dead', 3, 3, 'RuntimeError: order ' || i || ' lost', "
    "now(), %(tags)s::text[] FROM generate_series(1, %(n)s) AS i RETURNING *) "
    "INSERT INTO dead_letter_jobs (original_id, type, queue, payload, priority, max_retries, error, attempts) "
    "SELECT id, type, queue, payload, priority, max_retries, error, 4 FROM j"
)

SEED = (
    "INSERT INTO jobs (type, queue, payload, status, run_at, error, completed_at, tags) "
    "SELECT %(type)s, %(queue)s, jsonb_build_object('i', i), %(status)s, now() + make_interval(secs => %(delay)s), "
    "%(error)s, CASE WHEN %(status)s IN ('done', 'dead', 'cancelled') THEN now() END, %(tags)s::text[] "
    "FROM generate_series(1, %(n)s) AS i"
)


@pytest.fixture
def control(conn: psycopg.Connection) -> psycopg.Connection:
    """``conn``, with the operations, the audit trail and the dead-letter groups emptied too."""
    conn.execute(f"TRUNCATE {CONTROL_TABLES} RESTART IDENTITY")
    return conn


def seed_dead(conn: psycopg.Connection, n: int, *, type: str = "seeded", queue: str = "default",
              tags: list[str] | None = None) -> None:
    """``n`` dead jobs, each with its dead letter (all of one group: their errors differ
    only by a number)."""
    conn.execute(SEED_DEAD, {"type": type, "queue": queue, "n": n, "tags": tags})


def seed(conn: psycopg.Connection, n: int, status: str, *, type: str = "seeded", queue: str = "default",
         delay: float = 0.0, error: str | None = None, tags: list[str] | None = None) -> list[int]:
    """``n`` jobs in ``status`` (pending ones due in ``delay`` seconds); their ids."""
    conn.execute(SEED, {"type": type, "queue": queue, "status": status, "delay": delay, "error": error,
                        "tags": tags, "n": n})
    return [row[0] for row in conn.execute("SELECT id FROM jobs WHERE type = %s ORDER BY id", (type,))]


def statuses(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())


def audit_actions(conn: psycopg.Connection) -> list[tuple[str, dict, dict]]:
    return [tuple(row) for row in conn.execute("SELECT action, target, counts FROM jobq_audit ORDER BY id")]
