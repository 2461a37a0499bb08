"""The runs of ``span`` jobs (support.handlers.span) as intervals, and how many of them
overlapped at most, per queue or per concurrency key.

A run's interval is from its handler's start (after its claim committed) to its end
(before its outcome was written): inside the time its slot was held. A run without an
end of its own (its worker killed, or exited on a database error, or its handler's last
write lost to a database restart) ends at the earliest of what must have come after its
end: the test's kill of its process (:func:`kill`, test_kills, read after the kill),
the start of the next run in the same process (a worker runs one handler at a time),
the failure its attempt recorded (that error's ``at``) and the freeing of its slot
(test_slot_frees, written by a trigger in the transaction that freed it). The last is
an end as late as the limit allows, never earlier than the run's: while the slot is
held nobody else takes it, so bounding a run by it can only count more overlap, and a
limit that holds is still met. A run that held no slot and had none of the others is
counted as ending where it started (:func:`unbounded` says how many): it counts for no
limit anyway.

:func:`outlived` is the breach itself, if any: runs that recorded an end after their
slot was freed (a slot freed while its holder still ran).
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
               WHERE j.id = t.job_id AND (e->>'attempt')::int = t.attempt),
              (SELECT min(f.at) FROM test_slot_frees AS f WHERE f.job_id = t.job_id AND f.lease = t.lease)),
        t.started) AS until
    FROM test_spans AS t),
events AS (SELECT {scope} AS scope, started AS at, 1 AS d FROM s WHERE {scope} IS NOT NULL
           UNION ALL SELECT {scope}, until, -1 FROM s WHERE {scope} IS NOT NULL)
SELECT scope, max(running) FROM (
    SELECT scope, sum(d) OVER (PARTITION BY scope ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS running FROM events
) AS x GROUP BY scope
"""


# When each slot of jobq_limit_slots was freed (whoever freed it: the outcome, the
# reaper's sweep, a release), in the freeing transaction, on the database's clock.
SLOT_FREES_CREATE = """
CREATE TABLE IF NOT EXISTS test_slot_frees (job_id bigint NOT NULL, lease bigint NOT NULL, at timestamptz NOT NULL);
CREATE OR REPLACE FUNCTION test_slot_freed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_slot_frees (job_id, lease, at) SELECT job_id, lease, clock_timestamp() FROM gone;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS test_slot_freed ON jobq_limit_slots;
CREATE TRIGGER test_slot_freed AFTER DELETE ON jobq_limit_slots REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION test_slot_freed();
"""


def max_overlap(conn: psycopg.Connection, scope: str) -> dict[str, int]:
    """The most runs at once per ``scope`` ('queue' or 'concurrency_key')."""
    query = sql.SQL(OVERLAP).format(scope=sql.Identifier(scope))
    return {name: int(n) for name, n in conn.execute(query).fetchall()}


def create(conn: psycopg.Connection) -> None:
    from support.handlers import SPANS_CREATE

    conn.execute(SPANS_CREATE)
    conn.execute("CREATE TABLE IF NOT EXISTS test_kills (pid integer NOT NULL, at timestamptz NOT NULL)")
    conn.execute(SLOT_FREES_CREATE)
    conn.execute("TRUNCATE test_spans, test_kills, test_slot_frees")


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
    start, no failure recorded for their attempt, no slot freed."""
    return int(conn.execute(
        "SELECT count(*) FROM test_spans AS t WHERE t.ended IS NULL "
        "AND NOT EXISTS (SELECT FROM test_kills AS k WHERE k.pid = t.pid AND k.at >= t.started) "
        "AND NOT EXISTS (SELECT FROM test_spans AS n WHERE n.pid = t.pid AND n.started > t.started) "
        "AND NOT EXISTS (SELECT FROM jobs AS j, jsonb_array_elements(j.errors) AS e "
        "WHERE j.id = t.job_id AND (e->>'attempt')::int = t.attempt) "
        "AND NOT EXISTS (SELECT FROM test_slot_frees AS f WHERE f.job_id = t.job_id AND f.lease = t.lease)"
    ).fetchone()[0])


def outlived(conn: psycopg.Connection) -> list[tuple]:
    """Runs that ended after their slot was freed: (job, lease, pid, started, ended, freed)."""
    return conn.execute(
        "SELECT t.job_id, t.lease, t.pid, t.started, t.ended, f.at FROM test_spans AS t "
        "JOIN test_slot_frees AS f USING (job_id, lease) WHERE t.ended > f.at ORDER BY t.job_id"
    ).fetchall()
