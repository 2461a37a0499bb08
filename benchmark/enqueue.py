"""enqueue_many against a raw COPY of the same rows into the same table.

    python benchmark/enqueue.py --jobs 20000 --rounds 5 [--database-url URL] [--json]

Each round truncates the tables, COPYs N rows (type, queue, payload, priority,
max_retries) straight into ``jobs``, truncates again and enqueues the same N rows
with ``jobq.enqueue_many`` (validation, the array insert, RETURNING of every row).
The median of the rounds is reported.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg

import jobq
from common import database, emit, environment, migrated, reset


def rows(n: int) -> list[dict]:
    return [{"type": "noop", "payload": {"i": i, "user": f"u{i % 97}"}, "priority": 1 + i % 10} for i in range(n)]


def raw_copy(url: str, jobs: list[dict]) -> float:
    import json

    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        with conn.cursor().copy("COPY jobs (type, queue, payload, priority, max_retries) FROM STDIN") as copy:
            for job in jobs:
                copy.write_row((job["type"], "default", json.dumps(job["payload"]), job["priority"], 3))
        conn.commit()
        return time.perf_counter() - started


def enqueue_many(url: str, jobs: list[dict]) -> float:
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        jobq.enqueue_many(jobs, conn=conn)
        conn.commit()
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    jobs = rows(args.jobs)
    copy_times, enqueue_times = [], []
    with database(args.database_url) as url:
        migrated(url)
        for _ in range(args.rounds):
            reset(url)
            copy_times.append(raw_copy(url, jobs))
            reset(url)
            enqueue_times.append(enqueue_many(url, jobs))
        reset(url)
    copy_rate = args.jobs / statistics.median(copy_times)
    enqueue_rate = args.jobs / statistics.median(enqueue_times)
    result = {
        **environment(),
        "jobs": args.jobs,
        "rounds": args.rounds,
        "raw_copy_rows_per_s": round(copy_rate),
        "enqueue_many_jobs_per_s": round(enqueue_rate),
        "ratio": round(enqueue_rate / copy_rate, 3),
    }
    if args.json:
        emit(result, True)
    else:
        print(f"raw COPY       {copy_rate:>10,.0f} rows/s")
        print(f"enqueue_many   {enqueue_rate:>10,.0f} jobs/s   ({enqueue_rate / copy_rate:.0%} of COPY)")


if __name__ == "__main__":
    main()
