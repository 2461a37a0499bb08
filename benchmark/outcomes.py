"""What each way a job can end costs a drain, as ratios within one run: N jobs that all
end the same way, drained by `jobq worker --concurrency W`, scenarios taking turns
(--rounds), each divided by the plain success's jobs/s of the same round.

    python benchmark/outcomes.py [--jobs 20000] [--workers 2] [--rounds 2] [--database-url URL] [--json]

Scenarios (handlers: the built-ins and benchmark/outcome_handlers.py):
- done: noop, a success;
- dead at once: always_fail with max_retries 0, a failure that dead-letters the job;
- failed once, then done: each job fails its first attempt and succeeds on its retry
  (JOBQ_BACKOFF_BASE 0.1 s: the retry is due at once);
- snoozed once, then done: each job snoozes 0.1 s, then succeeds;
- async def noop: a success of an ``async def`` handler.

Jobs/s is measured from the first claim to the last end (completed_at): the first claim
is a marker job's, of the highest priority (a retried or snoozed job's claimed_at is its
last claim's). Without --database-url an embedded PostgreSQL 16 is started for the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import psycopg

import jobq
import stack
from common import database, emit, environment, migrated, parse, reset
from drain import wait_done

HERE = Path(__file__).resolve().parent
MARKER = {"type": "noop", "priority": 10}  # claimed first, once: its claimed_at is the drain's start
ENDED = (
    "SELECT count(*), extract(epoch FROM max(coalesce(completed_at, heartbeat_at)) "
    "- (SELECT claimed_at FROM jobs WHERE priority = 10)) FROM jobs WHERE status IN ('done', 'dead')"
)
SCENARIOS = {
    "done": {"type": "noop"},
    "dead at once": {"type": "always_fail", "max_retries": 0},
    "failed once, then done": {"type": "fails_once"},
    "snoozed once, then done": {"type": "snoozes_once"},
    "async def noop": {"type": "async_noop"},
}


def run(url: str, scenario: str, n: int, workers: int) -> float:
    reset(url)
    with psycopg.connect(url, autocommit=True) as conn:
        jobq.enqueue(**MARKER, conn=conn)
        for start in range(0, n, 10_000):
            jobq.enqueue_many([SCENARIOS[scenario]] * min(10_000, n - start), conn=conn)
        env = {
            "JOBQ_LOG_LEVEL": "WARNING", "JOBQ_BACKOFF_BASE": "0.1", "JOBQ_BACKOFF_JITTER": "0",
            "JOBQ_HANDLERS": "outcome_handlers",
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        with stack.workers(url, workers, env=env, log_name="worker-outcomes"):
            wait_done(conn, n + 1, timeout=600, statuses=("done", "dead"))
        count, seconds = conn.execute(ENDED).fetchone()
    return count / float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parse(parser)
    rates: dict[str, list[float]] = {s: [] for s in SCENARIOS}
    with database(args.database_url) as url:
        migrated(url)
        for _ in range(args.rounds):
            for scenario in SCENARIOS:
                rates[scenario].append(run(url, scenario, args.jobs, args.workers))
    base = rates["done"]
    result = {**environment(), "jobs": args.jobs, "workers": args.workers, "rounds": args.rounds, "scenarios": {
        s: {"jobs_per_s": [round(r) for r in rs], "median": round(statistics.median(rs)),
            "ratio": round(statistics.median(r / b for r, b in zip(rs, base)), 2)}
        for s, rs in rates.items()
    }}
    if args.json:
        emit(result, True)
        return
    print(f"{args.jobs:,} jobs each, {args.workers} workers, {args.rounds} rounds (median jobs/s; ratio to done)")
    for scenario, figures in result["scenarios"].items():
        runs = ", ".join(f"{r:,}" for r in figures["jobs_per_s"])
        print(f"  {scenario:26} {figures['median']:>8,}/s  {figures['ratio']:.2f}x   ({runs})")


if __name__ == "__main__":
    main()
