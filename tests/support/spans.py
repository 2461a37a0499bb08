"""The runs of ``span`` jobs (support.handlers.span) as intervals, and how many of them
overlapped at most, per queue or per concurrency key.

A run's interval is from its handler's start (after its claim committed) to its end
(before its outcome was written): inside the time its slot was held. A run without an
end of its own (its worker killed, or its handler's last write lost to a database
restart) ends at the earliest of what must have come after its end: the test's kill
of its process (:func:`kill`, test_kills, read after the kill), the start of the next
run in the same process (a worker runs one handler at a time) and the failure its
attempt recorded (that error's ``at``). A run ended by neither (its worker exited on a
database error while the job was still marked claimed, and it went back to pending with
no attempt counted) has no bound on its end that does not also cover other jobs' runs
in its slot afterwards: it is counted as ending where it started (left out), and
:func:`unbounded` says how many there were.
"""

from __future__ import annotations

import os
import signal

import psycopg
from psycopg import sql

OVERLAP = """
WITH s AS (
    SELECT t.job_id, t.lease, t.pid, t.attempt, t.ended, t.queue, t.concurrency_key, t.started, coalesce(t.ended,
        least((SELECT min(k.at) FROM test_kills AS k WHERE k.pid = t.pid AND k.at >= t.started),
              (SELECT min(n.started) FROM test_spans AS n WHERE n.pid = t.pid AND n.started > t.started),
              (SELECT max((e->>'at')::timestamptz) FROM jobs AS j, jsonb_array_elements(j.errors) AS e
               WHERE j.id = t.job_id AND (e->>'attempt')::int = t.attempt)), t.started) AS until
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
    conn.execute("CREATE TABLE IF NOT EXISTS test_kills (pid integer NOT NULL, at timestamptz NOT NULL)")
    conn.execute("TRUNCATE test_spans, test_kills")


def kill(conn: psycopg.Connection, pid: int) -> None:
    """SIGKILL a worker and record when (after the kill: its runs had ended by then)."""
    os.kill(pid, signal.SIGKILL)
    conn.execute("INSERT INTO test_kills (pid, at) VALUES (%s, clock_timestamp())", (pid,))


def at_most(conn: psycopg.Connection, scope: str, name: str) -> list[tuple]:
    """The runs of ``name`` (a queue or key) under way at the instant the most were: for
    an assertion's message."""
    query = sql.SQL(
        "WITH s AS (" + OVERLAP.split("WITH s AS (", 1)[1].split("),\nevents", 1)[0] + "), "
        "x AS (SELECT t.*, (SELECT count(*) FROM s AS o WHERE o.{scope} = t.{scope} AND o.started <= t.started "
        "AND o.until > t.started) AS n FROM s AS t WHERE t.{scope} = %s) "
        "SELECT o.* FROM s AS o, (SELECT * FROM x ORDER BY n DESC LIMIT 1) AS top "
        "WHERE o.{scope} = %s AND o.started <= top.started AND o.until > top.started"
    ).format(scope=sql.Identifier(scope))
    return conn.execute(query, (name, name)).fetchall()


def unbounded(conn: psycopg.Connection) -> int:
    """Runs left out of :func:`max_overlap`: no end, no kill of their process after their
    start, no failure recorded for their attempt."""
    return int(conn.execute(
        "SELECT count(*) FROM test_spans AS t WHERE t.ended IS NULL "
        "AND NOT EXISTS (SELECT FROM test_kills AS k WHERE k.pid = t.pid AND k.at >= t.started) "
        "AND NOT EXISTS (SELECT FROM test_spans AS n WHERE n.pid = t.pid AND n.started > t.started) "
        "AND NOT EXISTS (SELECT FROM jobs AS j, jsonb_array_elements(j.errors) AS e "
        "WHERE j.id = t.job_id AND (e->>'attempt')::int = t.attempt)"
    ).fetchone()[0])
