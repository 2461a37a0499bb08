"""What the dashboard's data costs with a million jobs in the table: the per-minute
rollup (jobq.observe.rollup) and the pages of GET /jobs, deep by offset and by cursor.

    python benchmark/dashdata.py [--finished 1000000] [--per-minute 5000] [--queues 10]
                                 [--rounds 10] [--database-url URL] [--json]

Fills the table with synthetic finished jobs (benchmark/scale.py's history, a day and
more of it) plus ``--per-minute`` jobs done in one minute, over ``--queues`` queues,
with counter samples around that minute. Then times, on one connection:

- ``rollup.take``: the leader's duty rolling up that one minute (the jobs done in it,
  their percentiles, the samples, the insert), and a catch-up pass of 15 minutes;
- ``rollup.series``: 15m, 1h and 24h windows, all queues and one, over a day of rows
  for every queue (1,440 minutes × (queues + 1) rows);
- ``jobq.list_jobs``: a page of 50 on top, at offset 900,000 (90 % of the rows), and at
  the same depth by cursor; unfiltered, by status (its total from the counters) and by
  type (its total counted).
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import psycopg

import jobq
from common import emit, environment, fresh_database, parse, timing
from jobq.store.sql.rollup import JOB_FINISHED_BY_MINUTE
from jobq.jobs import cursors
from jobq.observe import rollup
from observe import timed
from scale import fill_finished

# --per-minute jobs done within the minute starting at %(minute)s, spread over it and
# over the queues, with run times of 0-2 s and start latencies of 0-0.5 s.
FILL_MINUTE = (
    "INSERT INTO jobs (type, queue, payload, status, run_at, claimed_at, started_at, completed_at, created_at, attempt) "
    "SELECT 'noop', 'q' || (g %% %(queues)s), '{}', 'done', c - r - w, c - r, c - r, c, c - r - w, 0 "
    "FROM (SELECT g, %(minute)s::timestamptz + (g * interval '59 seconds' / %(n)s) AS c, "
    "random() * interval '2 seconds' AS r, random() * interval '500 ms' AS w "
    "FROM generate_series(1, %(n)s) AS g) AS s"
)
# A day of rollup rows for every queue and for all of them.
FILL_DAY = (
    "INSERT INTO jobq_minutes (minute, queue, completed, failed, dead, cancelled, pending, running, "
    "run_p50, run_p95, run_p99, latency_p50, latency_p95, latency_p99) "
    "SELECT m, q, 80, 1, 0, 0, 10, 2, 0.5, 1.5, 1.9, 0.1, 0.4, 0.5 "
    "FROM generate_series(date_trunc('minute', now()) - interval '1441 minutes', "
    "date_trunc('minute', now()) - interval '1 minute', interval '1 minute') AS m, "
    "unnest(%(queues)s::text[]) AS q ON CONFLICT DO NOTHING"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--per-minute", type=int, default=5000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    args = parse(parser)

    with fresh_database(args.database_url) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE jobq_minutes, job_counter_samples")
            fill_finished(conn, args.finished)
            now = conn.execute("SELECT now()").fetchone()[0]
            minute = now.replace(second=0, microsecond=0) - 2 * rollup.MINUTE
            conn.execute(FILL_MINUTE, {"n": args.per_minute, "queues": args.queues, "minute": minute})
            for at in (minute - timedelta(seconds=2), minute + timedelta(seconds=58)):
                conn.execute("INSERT INTO job_counter_samples SELECT %s, queue, type, name, sum(n) FROM job_counters "
                             "WHERE right(name, 6) = '_total' GROUP BY queue, type, name", (at,))
            conn.execute("VACUUM ANALYZE jobs")
            rows = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
            in_minute = conn.execute(
                "SELECT count(*) FROM jobs WHERE completed_at >= %s AND completed_at < %s", (minute, minute + rollup.MINUTE)
            ).fetchone()[0]

            def take_one() -> None:
                conn.execute("TRUNCATE jobq_minutes")
                assert rollup.take(conn, now=minute + rollup.MINUTE + timedelta(seconds=6)) == args.queues + 2  # and "default", the history's

            def take_catch_up() -> None:
                conn.execute("TRUNCATE jobq_minutes")
                conn.execute("INSERT INTO jobq_minutes (minute, queue, completed, failed, dead, cancelled) "
                             "VALUES (%s, '', 0, 0, 0, 0)", (minute - rollup.MINUTES_PER_PASS * rollup.MINUTE,))
                rollup.take(conn, now=minute + rollup.MINUTE + timedelta(seconds=6))

            take_minute = timed(take_one, args.rounds)
            catch_up = timed(take_catch_up, args.rounds)
            plan = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + JOB_FINISHED_BY_MINUTE,
                {"start": minute, "end": minute + rollup.MINUTE}))

            depth = int(rows * 0.9)
            created_at, row_id = conn.execute(
                "SELECT created_at, id FROM jobs ORDER BY created_at DESC, id DESC OFFSET %s LIMIT 1", (depth - 1,)
            ).fetchone()
            cursor = cursors.encode(created_at, row_id)
            assert [j.id for j in jobq.list_jobs(limit=50, cursor=cursor, conn=conn).items] == [
                j.id for j in jobq.list_jobs(limit=50, offset=depth, conn=conn).items]
            pages = {
                f"{name} {how}": timed(lambda a=arguments, k=criteria: jobq.list_jobs(limit=50, **a, **k, conn=conn),
                                       args.rounds)
                for name, criteria in (("all", {}), ("status=done", {"status": "done"}), ("type=noop", {"type": "noop"}))
                for how, arguments in (("first page", {}), (f"offset={depth}", {"offset": depth}),
                                       ("cursor at the same depth", {"cursor": cursor}))
            }

            conn.execute("TRUNCATE jobq_minutes")
            conn.execute(FILL_DAY, {"queues": [f"q{i}" for i in range(args.queues)] + [rollup.ALL]})
            conn.execute("VACUUM ANALYZE jobq_minutes")
            series = {
                f"{window} {'all' if queue is None else 'one queue'}": timed(
                    lambda w=window, q=queue: rollup.series(w, queue=q, conn=conn), args.rounds * 3)
                for window in rollup.WINDOWS for queue in (None, "q1")
            }
    result = {
        **environment(),
        "rows": rows,
        "done_in_the_minute": in_minute,
        "queues": args.queues,
        "take_one_minute": take_minute,
        "take_catch_up_15_minutes": catch_up,
        "series": series,
        "pages": pages,
        "finished_by_minute_plan": plan,
    }
    if args.json:
        emit(result, True)
    else:
        print(f"table: {rows:,} jobs, {in_minute:,} done in the minute rolled up, {args.queues} queues")
        print(timing("rollup.take, one minute     ", take_minute))
        print(timing("rollup.take, 15 minutes     ", catch_up))
        for name, figures in series.items():
            print(timing(f"rollup.series {name:<16}", figures))
        for name, figures in pages.items():
            print(timing(f"list_jobs {name:<40}", figures))
        print(plan)


if __name__ == "__main__":
    main()
