"""What flow control costs a drain, as ratios within one run (the same server, the
same minute): each scenario drains N noop jobs with `jobq worker --concurrency W`, and
its jobs/s is divided by the unlimited drain's of the same round, scenarios taking
turns (--rounds); the ratio shown is the median of the rounds' ratios (the machine's
speed drifts between rounds more than between the drains of one round).

    python benchmark/limits.py [--jobs 20000] [--workers 8] [--rounds 3] [--database-url URL] [--json]

Scenarios:
- unlimited: no limit anywhere (the plain claim; what benchmark/drain.py measures);
- queue limit that never binds: the queue's concurrency far above what W workers hold
  (every claim goes through the claim under limits, takes and frees a slot per job);
- 100 keys at concurrency 1: the jobs spread over keys tenant:0..99, a rule
  tenant:* = 1 (at most 100 jobs at once, each key one at a time);
- rate that never binds: the queue at 1,000,000/s (a start recorded per job);
- unlimited, claims of 12 (only with --only): no limit, JOBQ_CLAIM_BATCH=12, what the
  drain comes to when each worker holds 12 jobs at a time, as it may with 100 keys at
  concurrency 1 shared by 8 workers;
- unlimited, claims of 50 (only with --only): JOBQ_CLAIM_BATCH=50, the most a claim takes
  while a rule on keys exists (jobq.limits.gate.KEYED_CLAIM): what 100 keys at
  concurrency 1 would drain at if a claim under key rules cost what the plain one does.

Jobs/s is measured as drain.py does: from the first claim to the last completion,
both read from the database. Without --database-url an embedded PostgreSQL 16 is
started for the run.
"""

from __future__ import annotations

import argparse
import statistics

import psycopg

import jobq
import stack
from common import database, emit, environment, migrated, parse, reset
from drain import DRAIN_STATS, wait_done

KEYS = 100


def unlimited(conn: psycopg.Connection, n: int) -> list[dict]:
    return [{"type": "noop"}] * n


def queue_never_binds(conn: psycopg.Connection, n: int) -> list[dict]:
    jobq.set_queue_limits("default", concurrency=100_000, conn=conn)
    return [{"type": "noop"}] * n


def keys_at_one(conn: psycopg.Connection, n: int) -> list[dict]:
    jobq.set_limit("tenant:*", concurrency=1, conn=conn)
    return [{"type": "noop", "concurrency_key": f"tenant:{i % KEYS}"} for i in range(n)]


def rate_never_binds(conn: psycopg.Connection, n: int) -> list[dict]:
    jobq.set_queue_limits("default", rate="1000000/s", conn=conn)
    return [{"type": "noop"}] * n


SCENARIOS = {
    "unlimited": unlimited,
    "queue limit that never binds": queue_never_binds,
    f"{KEYS} keys at concurrency 1": keys_at_one,
    "rate that never binds": rate_never_binds,
    "unlimited, claims of 12": unlimited,
    "unlimited, claims of 50": unlimited,
}
REFERENCES = {"unlimited, claims of 12": {"JOBQ_CLAIM_BATCH": "12"}, "unlimited, claims of 50": {"JOBQ_CLAIM_BATCH": "50"}}  # run only when named with --only


def run(url: str, scenario: str, n: int, workers: int) -> tuple[float, list[str]]:
    """Jobs/s of one drain of ``scenario``, and the limits it ran under (as listed)."""
    reset(url)
    with psycopg.connect(url, autocommit=True) as conn:
        rows = SCENARIOS[scenario](conn, n)
        limits = [f"queue {q.queue}" for q in jobq.queue_limits(conn=conn)]
        limits += [f"rule {r.pattern}" for r in jobq.list_limits(conn=conn)]
        for start in range(0, n, 10_000):
            jobq.enqueue_many(rows[start:start + 10_000], conn=conn)
        env = {"JOBQ_LOG_LEVEL": "WARNING", **REFERENCES.get(scenario, {})}
        with stack.workers(url, workers, env=env, log_name="worker-limits"):
            wait_done(conn, n, timeout=600)
        done, seconds = conn.execute(DRAIN_STATS).fetchone()
    return done / float(seconds), limits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), help="scenarios to run (unlimited always)")
    args = parse(parser)
    named = args.only or [s for s in SCENARIOS if s not in REFERENCES]
    chosen = ["unlimited", *(s for s in SCENARIOS if s != "unlimited" and s in named)]
    rates: dict[str, list[float]] = {s: [] for s in chosen}
    limits: dict[str, set[str]] = {s: set() for s in chosen}
    with database(args.database_url) as url:
        migrated(url)
        for _ in range(args.rounds):
            for scenario in chosen:
                rate, under = run(url, scenario, args.jobs, args.workers)
                rates[scenario].append(rate)
                limits[scenario].update(under)
    base = rates["unlimited"]
    result = {**environment(), "jobs": args.jobs, "workers": args.workers, "rounds": args.rounds, "scenarios": {
        s: {"jobs_per_s": [round(r) for r in rs], "median": round(statistics.median(rs)),
            "ratios": [round(r / b, 2) for r, b in zip(rs, base)],
            "ratio": round(statistics.median(r / b for r, b in zip(rs, base)), 2), "limits": sorted(limits[s])}
        for s, rs in rates.items()
    }}
    if args.json:
        emit(result, True)
        return
    print(f"{args.jobs:,} noop jobs, {args.workers} workers, {args.rounds} rounds "
          "(median jobs/s; median of the rounds' ratios to unlimited)")
    for scenario, figures in result["scenarios"].items():
        runs = ", ".join(f"{r:,}" for r in figures["jobs_per_s"])
        ratios = ", ".join(f"{r:.2f}" for r in figures["ratios"])
        print(f"  {scenario:32} {figures['median']:>8,}/s  {figures['ratio']:.2f}x   ({runs}; {ratios})")


if __name__ == "__main__":
    main()
