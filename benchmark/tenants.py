"""One tenant's long backlog under a per-key limit, in a queue without fair turns: how
fast that tenant drains and how soon the other tenants' jobs behind it run.

    python benchmark/tenants.py [--backlog 200000] [--others 10] [--each 100] [--workers 2] [--seconds 20]
                                [--database-url URL] [--json]

A rule tenant:* = 1 (each tenant one job at a time); tenant:A's --backlog noop jobs are
enqueued first, then --each jobs of each of --others more tenants. `jobq worker
--concurrency W` runs for --seconds: reported are when the other tenants' jobs were all
done (polled every 0.2 s) and tenant A's jobs done per second over the run. A's rate is
bounded by its limit (one job at a time: a claim and an outcome per job); what this
measures is what a claim costs beside a long backlog of a full key (schema 33).

Without --database-url an embedded PostgreSQL 16 is started for the run.
"""

from __future__ import annotations

import argparse
import string
import time

import psycopg

import jobq
import stack
from common import database, emit, environment, migrated, parse, reset

DONE_BY_TENANT = (
    "SELECT count(*) FILTER (WHERE concurrency_key <> 'tenant:A'), count(*) FILTER (WHERE concurrency_key = 'tenant:A') "
    "FROM jobs WHERE status = 'done'"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--others", type=int, default=10, choices=range(1, 26))
    parser.add_argument("--each", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parse(parser)
    others = [f"tenant:{c}" for c in string.ascii_uppercase[1:args.others + 1]]
    with database(args.database_url) as url:
        migrated(url)
        reset(url)
        with psycopg.connect(url, autocommit=True) as conn:
            jobq.set_limit("tenant:*", concurrency=1, conn=conn)
            for start in range(0, args.backlog, 10_000):
                jobq.enqueue_many([{"type": "noop", "concurrency_key": "tenant:A"}] * min(10_000, args.backlog - start),
                                  conn=conn)
            jobq.enqueue_many([{"type": "noop", "concurrency_key": k} for k in others for _ in range(args.each)],
                              conn=conn)
            others_done_at = None
            with stack.workers(url, args.workers, env={"JOBQ_LOG_LEVEL": "WARNING"}, log_name="worker-tenants"):
                started = time.monotonic()
                while (elapsed := time.monotonic() - started) < args.seconds:
                    if others_done_at is None and conn.execute(DONE_BY_TENANT).fetchone()[0] >= len(others) * args.each:
                        others_done_at = elapsed
                    time.sleep(0.2)
                others_done, a_done = conn.execute(DONE_BY_TENANT).fetchone()
    result = {
        **environment(), "workers": args.workers, "backlog": args.backlog, "others": len(others) * args.each,
        "others_done_s": None if others_done_at is None else round(others_done_at, 1), "others_done": others_done,
        "a_per_s": round(a_done / args.seconds), "seconds": args.seconds,
    }
    if args.json:
        emit(result, True)
        return
    waited = "not all" if others_done_at is None else f"all done after {others_done_at:.1f} s"
    print(f"tenant:A {args.backlog:,} jobs in front at concurrency 1, {args.workers} workers, {args.seconds:g} s: "
          f"A {result['a_per_s']:,} jobs/s; the other tenants' {result['others']:,} jobs {waited}")


if __name__ == "__main__":
    main()
