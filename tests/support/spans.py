"""The runs of ``span`` jobs (support.handlers.span) as intervals, and how many of them
overlapped at most, per queue or per concurrency key.

A run's interval is from its handler's start (after its claim committed) to its end
(before its outcome was written): inside the time its slot was held. A run whose worker
was killed has no end of its own; it ends when the reaper recorded its attempt's
failure (the ``at`` of that error, the transaction that freed its slot), or is left
open when nothing recorded it.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

OVERLAP = """
WITH s AS (
    SELECT t.queue, t.concurrency_key, t.started, coalesce(t.ended, (
        SELECT max((e->>'at')::timestamptz) FROM jobs AS j, jsonb_array_elements(j.errors) AS e
        WHERE j.id = t.job_id AND (e->>'attempt')::int = t.attempt), 'infinity') AS until
    FROM test_spans AS t),
events AS (SELECT {scope} AS scope, started AS at, 1 AS d FROM s WHERE {scope} IS NOT NULL
           UNION ALL SELECT {scope}, until, -1 FROM s WHERE {scope} IS NOT NULL)
SELECT scope, max(running) FROM (
    SELECT scope, sum(d) OVER (PARTITION BY scope ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS running FROM events
) AS x GROUP BY scope
"""


def max_overlap(conn: psycopg.Connection, scope: str) -> dict[str, int]:
    """The most runs at once per ``scope`` ('queue' or 'concurrency_key')."""
    query = sql.SQL(OVERLAP).format(scope=sql.Identifier(scope))
    return {name: int(n) for name, n in conn.execute(query).fetchall()}


def create(conn: psycopg.Connection) -> None:
    from support.handlers import SPANS_CREATE

    conn.execute(SPANS_CREATE)
    conn.execute("TRUNCATE test_spans")
