"""Does a claim stay cheap as the table grows? Claim latency and drain rate with 0, 1 M
and 5 M finished jobs in the table, and with a backlog of 100 k and 1 M pending jobs.

    python benchmark/scale.py [--claims 2000] [--drain 20000] [--workers 2]
                              [--database-url URL] [--plot benchmark/results/claim_latency.png] [--json]

For each scenario the table is filled with synthetic finished rows (and pending
rows for a backlog) by INSERT ... SELECT, vacuumed and analysed as autovacuum would,
then:
- claim latency: one session claims one job and records it done, --claims times;
  the claim statement alone is timed (client side, loopback socket);
- drain rate: --drain noop jobs are drained by `jobq worker --concurrency W`,
  measured from the first claim to the last completion (database timestamps).
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from pathlib import Path

import psycopg

import jobq
from common import emit, environment, fresh_database, parse, percentiles, save_figure
import stack
from jobq.store.sql.database import DATABASE_NOW
from jobq.jobs import leases
from jobq.store import locks
from jobq.store import partitions
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE

# Synthetic history: finished noop jobs spread over the last week (5 M rows, 100 ms apart),
# each day in its partition as a leader with the default JOBQ_PARTITION_INTERVAL makes them.
HISTORY_DAYS = 6
DAY = 86_400.0
FILL_FINISHED = (
    "INSERT INTO jobs (type, payload, status, run_at, claimed_at, started_at, completed_at, created_at, "
    "result, attempt, lease, worker_id) "
    "SELECT 'noop', '{}', 'done', t, t, t, t + interval '2 ms', t, '{\"ok\": true}', 0, 0, 'history' "
    "FROM (SELECT now() - (g * interval '100 ms') AS t FROM generate_series(1, %(n)s) AS g) AS s"
)
# A backlog: pending noop jobs, all due.
FILL_PENDING = (
    "INSERT INTO jobs (type, payload, priority, run_at) "
    "SELECT 'noop', '{}', 1 + g %% 10, now() - interval '1 minute' FROM generate_series(1, %(n)s) AS g"
)
DRAINED = (
    "SELECT count(*), extract(epoch FROM max(completed_at) - min(claimed_at)) FROM jobs "
    "WHERE status = 'done' AND worker_id <> 'history' AND worker_id <> 'bench'"
)

SCENARIOS = [
    ("empty table", 0, 0),
    ("1 M finished", 1_000_000, 0),
    ("5 M finished", 5_000_000, 0),
    ("5 M finished + 100 k backlog", 5_000_000, 100_000),
    ("5 M finished + 1 M backlog", 5_000_000, 1_000_000),
]
CHUNK = 500_000


def fill_finished(conn: psycopg.Connection, n: int) -> None:
    """Add ``n`` done jobs of the past, CHUNK rows a statement."""
    for start in range(0, n, CHUNK):
        conn.execute(FILL_FINISHED, {"n": min(CHUNK, n - start)})


def history_partitions(url: str) -> None:
    """Daily partitions of finished jobs from HISTORY_DAYS ago to the days ahead."""
    with psycopg.connect(url, autocommit=True) as conn:
        (now,) = conn.execute(DATABASE_NOW).fetchone()
        for days in range(HISTORY_DAYS, -1, -1):
            partitions.make_ahead(conn, DAY, now - timedelta(days=days))


def fill(url: str, finished: int, backlog: int, have: int) -> None:
    """Bring the history to ``finished`` rows (reusing what is there) and add a backlog."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM jobs WHERE worker_id IS DISTINCT FROM 'history'")
        fill_finished(conn, finished - have)
        for start in range(0, backlog, CHUNK):
            conn.execute(FILL_PENDING, {"n": min(CHUNK, backlog - start)})
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("CHECKPOINT")  # the fill's writes flushed before anything is timed


def claim_latency(url: str, n: int) -> dict:
    base = locks.key(DEFAULT_ADVISORY_NAMESPACE, 0)
    with psycopg.connect(url, autocommit=True) as conn:
        if jobq.counts(conn=conn).depth["pending"] < n:
            jobq.enqueue_many([{"type": "noop"}] * n, conn=conn)
        timings = []
        for _ in range(n):
            started = time.perf_counter()
            (got,) = leases.claim(conn, ["default"], worker_id="bench", limit=1, lock_base=base).result()
            timings.append((time.perf_counter() - started) * 1000)
            leases.complete(conn, [got], ['{"ok":true}'], [0.0], lock_base=base).result()
    return {k + "_ms": round(v, 3) for k, v in percentiles(timings).items()}


def drain_rate(url: str, n: int, workers: int) -> dict:
    with psycopg.connect(url, autocommit=True) as conn:
        if jobq.counts(conn=conn).depth["pending"] < n:
            jobq.enqueue_many([{"type": "noop"}] * n, conn=conn)
        target = jobq.counts(conn=conn).depth["done"] + n
        with stack.workers(url, workers, env={"JOBQ_LOG_LEVEL": "WARNING"}):
            while jobq.counts(conn=conn).depth["done"] < target:
                time.sleep(0.05)
        done, seconds = conn.execute(DRAINED).fetchone()
    return {"jobs": done, "jobs_per_s": round(done / float(seconds))}


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["scenario"] for r in results]
    p50 = [r["claim"]["p50_ms"] for r in results]
    p99 = [r["claim"]["p99_ms"] for r in results]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], p50, width=0.4, label="p50")
    ax.bar([i + 0.2 for i in x], p99, width=0.4, label="p99")
    ax.set_xticks(list(x), names, rotation=15, ha="right")
    ax.set_ylabel("claim statement latency (ms)")
    ax.set_title("Claim latency against table size (one job per claim, loopback)")
    ax.legend()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every table size (0.01 for a smoke run)")
    parser.add_argument("--plot", type=Path)
    args = parse(parser)

    results = []
    with fresh_database(args.database_url) as url:
        history_partitions(url)
        have = 0
        for name, finished, backlog in SCENARIOS:
            finished, backlog = int(finished * args.scale), int(backlog * args.scale)
            started = time.monotonic()
            fill(url, finished, backlog, have)
            have = finished
            filled = time.monotonic() - started
            result = {
                "scenario": name,
                "finished_rows": finished,
                "backlog": backlog,
                "claim": claim_latency(url, args.claims),
                "drain": drain_rate(url, args.drain, args.workers),
                "fill_seconds": round(filled, 1),
            }
            results.append(result)
            if not args.json:
                c, d = result["claim"], result["drain"]
                print(
                    f"{name:32} claim p50 {c['p50_ms']:.3f} ms  p95 {c['p95_ms']:.3f} ms  p99 {c['p99_ms']:.3f} ms"
                    f"   drain {d['jobs_per_s']:,} jobs/s",
                    flush=True,
                )
    summary = {**environment(), "workers": args.workers, "scenarios": results}
    if results[0]["claim"]["p50_ms"]:
        summary["claim_p50_ratio_largest_to_empty"] = round(results[-1]["claim"]["p50_ms"] / results[0]["claim"]["p50_ms"], 2)
    if args.plot:
        plot(results, args.plot)
    if args.json:
        emit(summary, True)
    else:
        print(f"claim p50, largest table / empty table: {summary.get('claim_p50_ratio_largest_to_empty')}")


if __name__ == "__main__":
    main()
