"""The row factory: jobs in any status, and dead letters, written by SQL (fast: no worker
runs them), and reading them back.

:func:`insert_jobs` writes ``n`` jobs in one INSERT, each with the columns a job in its
status has when the caller leaves them out (``BY_STATUS``: claimed_at, heartbeat_at,
worker_id and lease once claimed; started_at once running; completed_at once finished).
A column is given as a value, the same for every row, or as :func:`per_row` SQL
computed from the row's number ``i`` (1..n) and its ``status``: one statement may write
rows of mixed statuses, queues and types, as the insert trigger's tests need.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

# Every status of the seed's HTTP contract (GET /jobs?status=, queue_depth by status):
# "failed" too, which no jobq process writes, and "waiting" (a workflow's step, schema 15).
STATUSES = ("pending", "claimed", "running", "done", "failed", "dead", "cancelled", "waiting")
# The statuses jobq writes on a job outside a workflow.
WRITTEN = ("pending", "claimed", "running", "done", "dead", "cancelled")

# What a column left out holds, by the row's status.
BY_STATUS = {
    "claimed_at": "CASE WHEN status <> 'pending' THEN now() END",
    "heartbeat_at": "CASE WHEN status <> 'pending' THEN now() END",
    "worker_id": "CASE WHEN status <> 'pending' THEN 'seeded:1:w' END",
    "lease": "CASE WHEN status <> 'pending' THEN i END",
    "started_at": "CASE WHEN status NOT IN ('pending', 'claimed') THEN now() END",
    "completed_at": "CASE WHEN status IN ('done', 'failed', 'dead', 'cancelled') THEN now() END",
}
JSON_COLUMNS = {"payload", "result", "errors", "progress"}

INSERT = "INSERT INTO jobs ({columns}) SELECT {values} FROM (SELECT i, {status} AS status FROM generate_series(1, {n}) AS i) AS r RETURNING id"
LETTERS = (
    "INSERT INTO dead_letter_jobs (original_id, type, queue, payload, priority, max_retries, error, attempts, errors, "
    "worker_id) SELECT id, type, queue, payload, priority, max_retries, error, attempt + 1, errors, worker_id "
    "FROM jobs WHERE id = ANY(%s) ORDER BY id"
)


def per_row(template: str, *values: Any) -> sql.Composable:
    """A column's SQL for each row: ``template`` may use ``i`` (the row's number, 1..n),
    ``status`` (its status), and ``{}`` for each of ``values``, passed as literals
    (cast them where the type matters: ``{}::text[]``)."""
    return sql.SQL(template).format(*(sql.Literal(value) for value in values))


def _value(column: str, value: Any) -> sql.Composable:
    if isinstance(value, sql.Composable):
        return value
    if column in JSON_COLUMNS and isinstance(value, (dict, list)):
        return sql.Literal(Jsonb(value))
    if column == "tags" and value is not None:
        return sql.SQL("{}::text[]").format(sql.Literal(list(value)))
    return sql.Literal(value)


def insert_jobs(conn: psycopg.Connection, n: int = 1, status: str | sql.Composable = "pending", **columns: Any) -> list[int]:
    """``n`` jobs in ``status`` (a status, or :func:`per_row` SQL), in one INSERT, with
    ``columns`` as given and the others as ``BY_STATUS`` or the table's defaults; their ids, in order."""
    values = {name: sql.SQL(default) for name, default in BY_STATUS.items()}
    values |= {name: _value(name, value) for name, value in columns.items()}
    values["status"] = sql.Identifier("status")
    statement = sql.SQL(INSERT).format(
        columns=sql.SQL(", ").join(map(sql.Identifier, values)),
        values=sql.SQL(", ").join(values.values()),
        status=_value("status", status),
        n=sql.Literal(n),
    )
    return sorted(job_id for (job_id,) in conn.execute(statement))


def seed(conn: psycopg.Connection, n: int, status: str, *, type: str = "seeded", queue: str = "default",
         delay: float = 0.0, error: str | None = None, tags: list[str] | None = None) -> list[int]:
    """``n`` jobs in ``status`` (pending ones due in ``delay`` seconds), payload {"i": i}; their ids."""
    return insert_jobs(conn, n, status, type=type, queue=queue, payload=per_row("jsonb_build_object('i', i)"),
                       run_at=per_row("now() + make_interval(secs => {})", delay), error=error, tags=tags)


def seed_dead(conn: psycopg.Connection, n: int, *, type: str = "seeded", queue: str = "default",
              tags: list[str] | None = None, **columns: Any) -> list[int]:
    """``n`` dead jobs, each with its dead letter, as a worker leaves them: by default
    failed on each of 4 runs, all of one group (their errors differ only by a number);
    ``columns`` as :func:`insert_jobs` takes them. Their ids."""
    dead = {"attempt": 3, "max_retries": 3, "payload": per_row("jsonb_build_object('i', i)"),
            "error": per_row("'RuntimeError: order ' || i || ' lost'"), **columns}
    ids = insert_jobs(conn, n, "dead", type=type, queue=queue, tags=tags, **dead)
    conn.execute(LETTERS, (ids,))
    return ids


def statuses(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())


def audit_actions(conn: psycopg.Connection) -> list[tuple[str, dict, dict]]:
    return [tuple(row) for row in conn.execute("SELECT action, target, counts FROM jobq_audit ORDER BY id")]
