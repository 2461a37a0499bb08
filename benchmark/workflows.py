"""What a workflow costs against the same jobs alone, in the same run.

    python benchmark/workflows.py [--width 10000] [--chain 200] [--workers 2] [--database-url URL] [--json]

1. Fan-out, fan-in: one noop step, then --width noop steps after it, then one after
   them all; end to end (the first step's claim to the last step's completion, database
   clock) against draining --width independent noop jobs (first claim to last
   completion). Target: at most 1.5x.
2. A chain of --chain noop steps: per-step overhead (a step's start less its parent's
   completion: the release, the wake-up, the claim) p50 against the wake-up p50 of
   single jobs enqueued one at a time at 50/s (start less creation). Target: at most 2x.

Without --database-url an embedded PostgreSQL 16 (default settings, fsync on) is started
for the run.
"""

from __future__ import annotations

import argparse
import time

import psycopg

import jobq
import stack
from common import database, emit, environment, migrated, parse, percentiles, reset

SPAN = "SELECT extract(epoch FROM max(completed_at) - min(claimed_at)) FROM jobs WHERE status = 'done'"
STEP_GAPS = (
    "SELECT extract(epoch FROM j.started_at - p.completed_at) FROM jobq_workflow_edges AS e "
    "JOIN jobq_workflow_steps AS ps ON ps.workflow_id = e.workflow_id AND ps.name = e.parent "
    "JOIN jobq_workflow_steps AS cs ON cs.workflow_id = e.workflow_id AND cs.name = e.child "
    "JOIN jobs AS p ON p.id = ps.job_id JOIN jobs AS j ON j.id = cs.job_id"
)
WAKE_UPS = "SELECT extract(epoch FROM started_at - created_at) FROM jobs WHERE status = 'done'"


def clear(url: str) -> None:
    reset(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobq_workflows, jobq_workflow_steps, jobq_workflow_edges")


def wait_done(conn: psycopg.Connection, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while jobq.counts(conn=conn).depth["done"] < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {jobq.counts(conn=conn).depth['done']} of {n} jobs done after {timeout} s")
        time.sleep(0.02)


def independent(url: str, width: int, workers: int) -> float:
    clear(url)
    with psycopg.connect(url, autocommit=True) as conn:
        jobq.enqueue_many([{"type": "noop"}] * width, conn=conn)
        with stack.workers(url, workers, log_name="workflows-independent"):
            wait_done(conn, width)
        return float(conn.execute(SPAN).fetchone()[0])


def fan_out_fan_in(url: str, width: int, workers: int) -> float:
    clear(url)
    wf = jobq.Workflow(name="fan-out-fan-in")
    root = wf.add("noop", name="root")
    middle = [wf.add("noop", name=f"m{i}", after=[root]) for i in range(width)]
    wf.add("noop", name="sink", after=middle)
    with psycopg.connect(url, autocommit=True) as conn:
        wf.enqueue(conn=conn)
        with stack.workers(url, workers, log_name="workflows-fan"):
            wait_done(conn, width + 2)
        return float(conn.execute(SPAN).fetchone()[0])


def chain(url: str, length: int, workers: int) -> list[float]:
    clear(url)
    wf = jobq.chain(*[jobq.step("noop", name=f"s{i:04d}") for i in range(length)])
    with psycopg.connect(url, autocommit=True) as conn:
        with stack.workers(url, workers, log_name="workflows-chain"):
            time.sleep(2)  # workers booted and idle
            wf.enqueue(conn=conn)
            wait_done(conn, length)
        return [float(v) * 1000 for (v,) in conn.execute(STEP_GAPS)]


def wake_ups(url: str, n: int, workers: int, rate: float = 50.0) -> list[float]:
    clear(url)
    with psycopg.connect(url, autocommit=True) as conn:
        with stack.workers(url, workers, log_name="workflows-single"):
            time.sleep(2)
            started = time.monotonic()
            for i in range(n):
                delay = started + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                jobq.enqueue("noop", conn=conn)
            wait_done(conn, n)
        return [float(v) * 1000 for (v,) in conn.execute(WAKE_UPS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=10_000)
    parser.add_argument("--chain", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    args = parse(parser)
    with database(args.database_url) as url:
        migrated(url)
        alone = independent(url, args.width, args.workers)
        fan = fan_out_fan_in(url, args.width, args.workers)
        gaps = percentiles(chain(url, args.chain, args.workers))
        single = percentiles(wake_ups(url, args.chain, args.workers))
    result = {
        **environment(), "workers": args.workers,
        "fan": {"width": args.width, "independent_s": round(alone, 3), "workflow_s": round(fan, 3),
                "ratio": round(fan / alone, 2)},
        "chain": {"steps": args.chain, "step_p50_ms": round(gaps["p50"], 2), "step_p95_ms": round(gaps["p95"], 2),
                  "wake_up_p50_ms": round(single["p50"], 2), "wake_up_p95_ms": round(single["p95"], 2),
                  "ratio": round(gaps["p50"] / single["p50"], 2)},
    }
    if args.json:
        emit(result, True)
        return
    f, c = result["fan"], result["chain"]
    print(f"fan      1 -> {f['width']:,} -> 1 noop steps, {args.workers} workers: {f['workflow_s']} s against "
          f"{f['independent_s']} s for {f['width']:,} independent jobs: {f['ratio']}x (target <= 1.5x)")
    print(f"chain    {c['steps']} steps: per-step p50 {c['step_p50_ms']} ms (p95 {c['step_p95_ms']}) against a "
          f"single job's wake-up p50 {c['wake_up_p50_ms']} ms (p95 {c['wake_up_p95_ms']}): {c['ratio']}x (target <= 2x)")


if __name__ == "__main__":
    main()
