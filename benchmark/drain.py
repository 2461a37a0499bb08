"""How fast `jobq worker` drains a backlog, and how soon an idle worker starts a job.

    python benchmark/drain.py --jobs 20000 --workers 2 [--supervisors 1] [--queues 1] [--rate 200 --latency-jobs 2000]
                              [--only drain|latency|burst] [--database-url URL] [--log-level INFO] [--json]

1. Drain: enqueue N noop jobs with enqueue_many, start `jobq worker --concurrency W`
   (S of them with --supervisors S, each a host of its own by JOBQ_HOSTNAME, as several
   machines against one database), wait until every job is done; with --queues Q the jobs
   are spread over queues q0..q{Q-1}, every worker serving them all. Jobs/s is measured
   from the first claim to the last completion, both read from the database
   (claimed_at, completed_at); the sessions each supervisor held are counted meanwhile.
2. Latency: with the workers idle, enqueue jobs one at a time at a steady rate and
   report enqueue-to-start percentiles and the maximum (started_at - created_at,
   database clock).
3. Burst (only with --only burst): on a database of its own, just migrated (the
   planner knows nothing of jobs yet, as on a new install), with the workers booted
   and idle, enqueue N noop jobs in calls of 1,000 and measure as the drain does,
   from the first claim to the last completion.

Without --database-url an embedded PostgreSQL 16 (default settings, fsync on) is
started for the run.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import psycopg
from psycopg import conninfo, sql

import jobq
import stack
from common import database, emit, environment, migrated, parse, percentiles, reset

DRAIN_STATS = (
    "SELECT count(*), extract(epoch FROM max(completed_at) - min(claimed_at)) FROM jobs WHERE status = 'done'"
)
START_LATENCIES = "SELECT extract(epoch FROM started_at - created_at) FROM jobs WHERE status = 'done'"


def wait_done(conn: psycopg.Connection, n: int, timeout: float, statuses: tuple[str, ...] = ("done",)) -> None:
    """Until ``n`` jobs are in ``statuses`` (done, by default)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(jobq.counts(conn=conn).depth[s] for s in statuses) >= n:
            return
        time.sleep(0.05)
    depth = jobq.counts(conn=conn).depth
    raise SystemExit(f"only {sum(depth[s] for s in statuses)} of {n} jobs {'/'.join(statuses)} after {timeout} s")


def drain(url: str, n: int, workers: int, log_level: str, supervisors: int = 1, queues: int = 1) -> dict:
    reset(url)
    names = [f"q{i}" for i in range(queues)] if queues > 1 else ["default"]
    with psycopg.connect(url, autocommit=True) as conn, ExitStack() as hosts:
        for start in range(0, n, 10_000):
            jobq.enqueue_many([{"type": "noop", "queue": names[i % len(names)]}
                               for i in range(start, min(start + 10_000, n))], conn=conn)
        for host in range(supervisors):
            env = {"JOBQ_LOG_LEVEL": log_level, "JOBQ_HOSTNAME": f"host-{host}", "JOBQ_QUEUES": ",".join(names)}
            hosts.enter_context(stack.workers(url, workers, env=env, log_name=f"worker-host-{host}"))
        wait_done(conn, n // 2, timeout=600)
        sessions = sessions_by_host(conn)
        wait_done(conn, n, timeout=600)
        done, seconds = conn.execute(DRAIN_STATS).fetchone()
    return {
        "jobs": done,
        "seconds": round(float(seconds), 3),
        "jobs_per_s": round(done / float(seconds)),
        "sessions_per_supervisor": sorted(sessions.values()),
    }


def sessions_by_host(conn: psycopg.Connection) -> Counter:
    """jobq's sessions now, by the host their application_name names ("jobq worker host-0:...")."""
    names = conn.execute("SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'jobq %'")
    return Counter(name.rsplit(" ", 1)[-1].split(":", 1)[0] for (name,) in names)


def latency(url: str, n: int, rate: float, workers: int, log_level: str) -> dict:
    reset(url)
    with psycopg.connect(url, autocommit=True) as conn:
        with stack.workers(url, workers, env={"JOBQ_LOG_LEVEL": log_level}):
            time.sleep(2)  # workers booted and idle
            started = time.monotonic()
            for i in range(n):
                target = started + i / rate
                delay = target - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                jobq.enqueue("noop", conn=conn)
            wait_done(conn, n, timeout=120)
        values = [float(row[0]) * 1000 for row in conn.execute(START_LATENCIES)]
    spread = {**percentiles(values), "max": max(values, default=float("nan"))}
    return {"jobs": n, "rate_per_s": rate, **{k + "_ms": round(v, 2) for k, v in spread.items()}}


@contextmanager
def new_database(url: str, suffix: str) -> Iterator[str]:
    """A database of its own on ``url``'s server, migrated, dropped afterwards."""
    name = f"{conninfo.conninfo_to_dict(url)['dbname']}_{suffix}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        own = conninfo.make_conninfo(url, dbname=name)
        migrated(own)
        yield own
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def burst(server_url: str, n: int, workers: int, log_level: str) -> dict:
    with new_database(server_url, "burst") as url, psycopg.connect(url, autocommit=True) as conn:
        with stack.workers(url, workers, env={"JOBQ_LOG_LEVEL": log_level}, log_name="worker-burst"):
            time.sleep(2)  # workers booted and idle; the leader's first look done
            for start in range(0, n, 1000):
                jobq.enqueue_many([{"type": "noop"}] * min(1000, n - start), conn=conn)
            wait_done(conn, n, timeout=600)
        done, seconds = conn.execute(DRAIN_STATS).fetchone()
    return {"jobs": done, "seconds": round(float(seconds), 3), "jobs_per_s": round(done / float(seconds))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--supervisors", type=int, default=1, help="supervisors of --workers each, one per host name")
    parser.add_argument("--queues", type=int, default=1, help="the drain's jobs spread over this many queues")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--latency-jobs", type=int, default=2000)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--only", choices=("drain", "latency", "burst"), help="run one of the measures")
    args = parse(parser)

    with database(args.database_url) as url:
        migrated(url)
        result = {**environment(), "workers": args.workers, "supervisors": args.supervisors}
        result["log_level"] = args.log_level
        if args.only in (None, "drain"):
            result["drain"] = drain(url, args.jobs, args.workers, args.log_level, args.supervisors, args.queues)
        if args.only in (None, "latency"):
            result["latency"] = latency(url, args.latency_jobs, args.rate, args.workers, args.log_level)
        if args.only == "burst":
            result["burst"] = burst(url, args.jobs, args.workers, args.log_level)
    if args.json:
        emit(result, True)
        return
    if "drain" in result:
        d = result["drain"]
        hosts = f"{args.workers} workers"
        if args.supervisors > 1:
            hosts = f"{args.supervisors} supervisors of {hosts}"
        if args.queues > 1:
            hosts = f"{hosts} of {args.queues} queues"
        print(
            f"drain    {d['jobs']:,} noop jobs, {hosts}: {d['jobs_per_s']:,} jobs/s ({d['seconds']} s); "
            f"sessions per supervisor {d['sessions_per_supervisor']}"
        )
    if "burst" in result:
        b = result["burst"]
        print(f"burst    {b['jobs']:,} noop jobs into {args.workers} idle workers: {b['jobs_per_s']:,} jobs/s ({b['seconds']} s)")
    if "latency" in result:
        lat = result["latency"]
        print(
            f"latency  enqueue -> start at {lat['rate_per_s']:g} jobs/s: "
            f"p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms, p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms"
        )


if __name__ == "__main__":
    main()
