"""Listing by tag with a million jobs: the first page newest first, for a rare tag (10
jobs) and a common one (half the table), as ``jobq.list_jobs(tag=...)`` (and so
``GET /jobs?tag=...``) reads it. Target: under 50 ms each.

    python benchmark/tags.py [--jobs 1000000] [--runs 20] [--database-url URL] [--json]

Fills ``jobs`` by SQL (finished jobs a tenth of a second apart; every other one tagged
``common``, ten spread over the table tagged ``rare``), VACUUM ANALYZE, then times each
listing ``--runs`` times after one warm-up, whole (its capped count, then its page),
and prints the plans of each statement a listing may send.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from psycopg import sql

import jobq
from common import emit, environment, fresh_database, parse, reset
from jobq.store.sql.ledger import JOB_LIST_COUNT_UP_TO, JOB_LIST_FEW, JOB_LIST_PAGE
from jobq.jobs.filters import JobFilter
from jobq.jobs.ledger import COUNT_LIMIT

CHUNK = 250_000
FILL = (
    "INSERT INTO jobs (type, payload, status, run_at, completed_at, created_at, tags) "
    "SELECT 'noop', '{}', 'done', t, t, t, CASE WHEN g %% %(rare_every)s = 0 THEN ARRAY['common', 'rare'] "
    "WHEN g %% 2 = 0 THEN ARRAY['common'] END "
    "FROM (SELECT g, now() - (g * interval '100 ms') AS t FROM generate_series(%(first)s, %(last)s) AS g) AS s"
)


def fill(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for first in range(1, n + 1, CHUNK):
            conn.execute(FILL, {"first": first, "last": min(n, first + CHUNK - 1), "rare_every": n // 10})
        conn.execute("VACUUM ANALYZE jobs")


def timed(action, runs: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    action()  # warm-up: the pages it reads are in the cache afterwards, as on a busy server
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(times), 2), "max_ms": round(max(times), 2)}


def plans(conn: psycopg.Connection, tag: str) -> dict[str, str]:
    """The plans of the statements a listing by ``tag`` may send (which one it sends
    depends on how many rows its capped count finds)."""
    job_filter = JobFilter(tag=tag)
    conditions = job_filter.conditions()
    params = {**job_filter.params(), "limit": 50, "offset": 0, "first": 50, "cap": COUNT_LIMIT + 1}
    statements = {
        "count": sql.SQL(JOB_LIST_COUNT_UP_TO).format(conditions=conditions),
        "page_many": sql.SQL(JOB_LIST_PAGE).format(conditions=conditions),
        "page_few": sql.SQL(JOB_LIST_FEW).format(conditions=conditions),
    }
    return {
        name: " / ".join(row[0].strip() for row in conn.execute(sql.SQL("EXPLAIN ") + statement, params))
        for name, statement in statements.items()
    }


def exact_count(conn: psycopg.Connection, tag: str) -> int:
    return conn.execute("SELECT count(*) FROM jobs WHERE tags @> ARRAY[%s]", (tag,)).fetchone()[0]  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parse(parser)

    result: dict = {**environment(), "jobs": args.jobs, "runs": args.runs}
    with fresh_database(args.database_url) as url:
        started = time.perf_counter()
        fill(url, args.jobs)
        result["fill_s"] = round(time.perf_counter() - started, 1)
        with psycopg.connect(url, autocommit=True) as conn:
            for tag in ("rare", "common"):
                page = jobq.list_jobs(tag=tag, limit=50, conn=conn)
                assert len(page.items) == min(50, page.total), page.total
                result[tag] = {
                    "matching": exact_count(conn, tag),
                    "total_shown": page.total,
                    "total_exact": page.total_exact,
                    "list_jobs": timed(lambda: jobq.list_jobs(tag=tag, limit=50, conn=conn), args.runs),
                    "plans": plans(conn, tag),
                }
        reset(url)
    if args.json:
        emit(result, True)
    else:
        print(f"{args.jobs:,} jobs (filled in {result['fill_s']} s); medians of {args.runs} runs")
        for tag in ("rare", "common"):
            r = result[tag]
            print(f"tag={tag:<7} {r['matching']:>8,} jobs   first page (list_jobs: page and total "
                  f"{r['total_shown']:,}{'' if r['total_exact'] else '+'}) "
                  f"median {r['list_jobs']['median_ms']:.2f} ms, max {r['list_jobs']['max_ms']:.2f} ms")
            for name, text in r["plans"].items():
                print(f"    {name}: {text}")


if __name__ == "__main__":
    main()
