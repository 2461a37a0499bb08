"""Sustained load with retention: does jobq stay flat for as long as it runs?

    python benchmark/soak.py --minutes 30 [--rate R] [--workers 2] [--retention 120]
                             [--partition-interval 60] [--sample-seconds 60] [--sample-percent 10]
                             [--database-url URL] [--plot FILE] [--json]

A producer enqueues noop jobs at a steady rate (default: 70 % of the drain rate
measured first, 20,000 jobs with the same workers) in small batches, every 20 ms,
while `jobq worker` drains them and the maintenance leader retires finished jobs
older than --retention seconds (dropping partitions --partition-interval seconds
long, with schema 13's layout). Each sample period (a minute by default) reports the
drain rate (completions counted by jobq's counters), enqueue -> start p50 / p99 of
the jobs finished in it (database clock, on --sample-percent of the table's pages;
the p99 of its parts, waiting to be claimed and waiting in the claimed batch; and the
slowest job found, its time, id and enqueue moment), the size on disk of `jobs` (all
its partitions) and of its indexes, its dead tuples, the WAL written, the oldest open transaction's age,
the resident memory of the supervisor, its maintenance process and its largest
worker, and the backlog (pending jobs). Samples are taken on a fixed schedule, halfway
between two partition boundaries. At the end the producer stops, the backlog drains
(5 minutes at most), and every enqueued job must be counted done or still waiting.

What must hold (printed at the end): drain rate (the mean of the samples) and p99
(of all the jobs of the samples together) over the last 5 samples within 10 % of
the first 5; `jobs` (table and indexes) not growing after the first retention cycle;
each process's memory flat after warm-up; nothing lost.

Without --database-url an embedded PostgreSQL 16 (default settings, fsync on) is
started for the run. Extra JOBQ_* variables in the environment reach the workers.
"""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg

import jobq
from jobq.jobs.ledger import Counts
import stack
from common import children_stat, database, emit, environment, migrated, parse, reset, save_figure
from drain import drain

TICK = 0.02  # seconds between two batches of the producer
WARM_UP_SAMPLES = 2  # memory is compared from the end of this sample on
WINDOW = 5  # samples compared at the start and the end
TOLERANCE = 0.10

# Enqueue -> start of the jobs finished in the period, from a sample of them: the
# pages of SAMPLE_PERCENT % of the table's pages (TABLESAMPLE SYSTEM; of the finished
# partitions the period touches, with schema 13's layout), each job finished in the
# period on them: so a job is in with that chance, and a page holds the jobs finished
# within a few milliseconds of each other. From it: a histogram of enqueue -> start
# (milliseconds to HISTOGRAM_DIGITS decimals, and how many jobs took each; the
# percentiles of several samples together are those of all their jobs, not an
# average of each sample's), the p99 of its two parts (waiting to be claimed, waiting
# in the claimed batch), and the slowest job found (its id, enqueue and claim moments,
# attempt and worker, to find its moment in the server's log). Reading every job of
# the minute (360,000 at 6,000/s) took 0.6-1 s of a core a minute, and in the run of
# 16:31 UTC, 4 December, the slowest job of 9 minutes in 30 was enqueued in the second
# or two the sample's queries ran: the measurement was the largest disturbance of
# what it measured. A tenth still puts 360 jobs a minute above its p99.
SAMPLE_PERCENT = 10  # --sample-percent
HISTOGRAM_DIGITS = 1
FINISHED_IN_PERIOD = (
    "WITH s AS MATERIALIZED (SELECT extract(epoch FROM started_at - created_at)::float8 AS total, "
    "extract(epoch FROM claimed_at - created_at)::float8 AS to_claim, "
    "extract(epoch FROM started_at - claimed_at)::float8 AS in_batch, id, created_at, claimed_at, attempt, worker_id "
    "FROM jobs TABLESAMPLE SYSTEM (%s) "
    "WHERE status = 'done' AND completed_at > now() - make_interval(secs => %s)) "
    "SELECT (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY to_claim) FROM s), "
    "(SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY in_batch) FROM s), "
    "(SELECT array_agg(ARRAY[ms, n] ORDER BY ms) FROM "
    f" (SELECT round(total::numeric * 1000, {HISTOGRAM_DIGITS})::float8 AS ms, count(*)::float8 AS n FROM s GROUP BY 1) AS h), "
    "slowest.total, slowest.id, slowest.created_at, slowest.claimed_at, slowest.attempt, slowest.worker_id "
    "FROM (SELECT * FROM s ORDER BY total DESC LIMIT 1) AS slowest"
)
# The sample's jobs (36,000 a minute at 6,000/s with a tenth) are sorted in memory,
# not spilled to disk, and read by one process, so that measuring takes less from
# the machine being measured (with parallel workers, a scan of a minute's jobs took
# both cores for a third of a second).
SAMPLER_SETTINGS = ("SET work_mem = '64MB'", "SET max_parallel_workers_per_gather = 0")
# Summed over the tables that hold rows: jobs itself before schema 13, its partitions
# after (pg_partition_tree lists a plain table as its own only leaf).
TABLE_STATE = (
    "SELECT sum(pg_table_size(t.relid))::bigint, sum(pg_indexes_size(t.relid))::bigint, "
    "sum(s.n_dead_tup)::bigint, "
    "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, "
    "(SELECT greatest(max(extract(epoch FROM now() - xact_start)), 0) FROM pg_stat_activity "
    " WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()) "
    "FROM pg_partition_tree('jobs') AS t LEFT JOIN pg_stat_user_tables AS s ON s.relid = t.relid WHERE t.isleaf"
)


class Producer(threading.Thread):
    """Enqueues ``rate`` noop jobs a second, in a batch every TICK, until stopped."""

    def __init__(self, url: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.rate = rate
        self.sent = 0
        self.behind = 0.0  # the most seconds the producer fell behind its schedule
        self.stopping = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            started = time.monotonic()
            while not self.stopping.is_set():
                due = int((time.monotonic() - started) * self.rate) - self.sent
                if due > 0:
                    jobq.enqueue_many([{"type": "noop"}] * due, conn=conn)
                    self.sent += due
                self.behind = max(self.behind, due / self.rate - TICK)
                self.stopping.wait(TICK)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory(conn: psycopg.Connection, supervisor: int) -> dict[str, float]:
    """Resident MB of the supervisor, its maintenance process and its largest worker."""
    workers = {pid for (pid,) in conn.execute("SELECT pid FROM workers")}
    kids = list(children_stat(supervisor))
    sizes = {"supervisor": rss_mb(supervisor)}
    sizes["maintenance"] = max((rss_mb(pid) for pid in kids if pid not in workers), default=float("nan"))
    sizes["worker_max"] = max((rss_mb(pid) for pid in kids if pid in workers), default=float("nan"))
    return sizes


def sample(
    conn: psycopg.Connection, seconds: float, done_before: int, wal_before: int, supervisor: int, percent: float
) -> dict:
    counts = jobq.counts(conn=conn)
    done = counts.totals.get("done_total", 0)
    finished = conn.execute(FINISHED_IN_PERIOD, (percent, seconds)).fetchone() or (None, None, [], math.nan) + (None,) * 5
    to_claim, in_batch, histogram, *slowest = finished
    histogram = [(ms, int(n)) for ms, n in histogram]
    table, indexes, dead, wal, oldest = conn.execute(TABLE_STATE).fetchone()
    return {
        "done_total": done,
        "drain_per_s": round((done - done_before) / seconds),
        "backlog": counts.depth["pending"],
        "p50_ms": percentile(histogram, 0.5),
        "p99_ms": percentile(histogram, 0.99),
        "latency_histogram_ms": histogram,
        "p99_to_claim_ms": round((to_claim or math.nan) * 1000, 1),
        "p99_in_batch_ms": round((in_batch or math.nan) * 1000, 1),
        "slowest": {
            "ms": round(slowest[0] * 1000, 1), "id": slowest[1],
            "enqueued_at": slowest[2] and slowest[2].isoformat(), "claimed_at": slowest[3] and slowest[3].isoformat(),
            "attempt": slowest[4], "worker": slowest[5],
        },
        "table_mb": round(table / 2**20, 1),
        "indexes_mb": round(indexes / 2**20, 1),
        "dead_tuples": dead or 0,
        "wal_mb": round((wal - wal_before) / 2**20, 1),
        "wal_position": wal,
        "oldest_xact_s": round(float(oldest), 1),
        "rss_mb": {name: round(size, 1) for name, size in memory(conn, supervisor).items()},
    }


def percentile(histogram: list[tuple[float, int]], q: float) -> float:
    """The ``q`` quantile (nearest rank) of a histogram of (milliseconds, jobs) in order."""
    rank = math.ceil(q * sum(n for _, n in histogram))
    seen = 0
    for ms, n in histogram:
        seen += n
        if seen >= max(rank, 1):
            return ms
    return math.nan


def pooled_p99(samples: list[dict]) -> float:
    """The p99 of every job of ``samples`` together (their histograms merged)."""
    merged: Counter[float] = Counter()
    for s in samples:
        merged.update(dict(s["latency_histogram_ms"]))
    return percentile(sorted(merged.items()), 0.99)


def in_queue(counts: Counts) -> int:
    """Jobs not finished yet: waiting, or in a worker's hands."""
    return sum(counts.depth[status] for status in ("pending", "claimed", "running"))


def verdict(samples: list[dict], p99_first_last: list[float], retention_samples: int, lost: int) -> dict[str, bool]:
    """The soak's conditions (see the module's docstring); ``p99_first_last``: the p99
    of the jobs of the first WINDOW samples and of the last WINDOW's (pooled_p99)."""
    first, last = samples[:WINDOW], samples[-WINDOW:]

    def within(start: float, end: float) -> bool:
        return abs(end - start) <= TOLERANCE * start

    def mean(field: str, window: list[dict]) -> float:
        return statistics.mean(s[field] for s in window)

    size = [s["table_mb"] + s["indexes_mb"] for s in samples]
    settled = size[min(retention_samples, len(size) - 1)]  # after the first retention cycle
    warm = samples[min(WARM_UP_SAMPLES, len(samples) - 1)]["rss_mb"]
    return {
        "drain rate flat": within(mean("drain_per_s", first), mean("drain_per_s", last)),
        "p99 flat": within(*p99_first_last),
        "size bounded": max(size[min(retention_samples, len(size) - 1):]) <= (1 + TOLERANCE) * settled,
        "memory flat": all(samples[-1]["rss_mb"][name] <= (1 + TOLERANCE) * warm[name] for name in warm),
        "nothing lost": lost == 0,  # every job enqueued is done or still waiting its turn
    }


def soak(url: str, args: argparse.Namespace) -> dict:
    rate = args.rate
    measured = None
    if rate is None:
        measured = drain(url, 20_000, args.workers, "WARNING")["jobs_per_s"]
        rate = 0.7 * measured
    reset(url)
    env = {"JOBQ_LOG_LEVEL": "WARNING", "JOBQ_RETENTION": str(args.retention),
           "JOBQ_PARTITION_INTERVAL": str(args.partition_interval)}
    samples: list[dict] = []
    with psycopg.connect(url, autocommit=True) as conn, stack.workers(url, args.workers, env=env) as supervisor:
        for setting in SAMPLER_SETTINGS:
            conn.execute(setting)
        time.sleep(2)  # booted
        # Samples halfway between two partition boundaries (multiples of the interval
        # since the epoch, where the leader makes and drops partitions), when the sample
        # period is a multiple of the interval: each measurement away from that work.
        interval = args.partition_interval
        time.sleep((interval / 2 - time.time() % interval) % interval)
        producer = Producer(url, rate)
        wal = conn.execute(TABLE_STATE).fetchone()[3]
        done = 0
        producer.start()
        # On a fixed schedule, not a period after the last sample's queries: each sample
        # then finds the cycle of partitions and vacuums at the same phase, and the
        # second or so a sample takes does not shift the next one later each time
        # (it did: the size grew by a second's partition a minute).
        started = time.monotonic()
        for index in range(1, int(args.minutes * 60 / args.sample_seconds + 0.5) + 1):
            time.sleep(max(started + index * args.sample_seconds - time.monotonic(), 0))
            samples.append(sample(conn, args.sample_seconds, done, wal, supervisor.pid, args.sample_percent))
            done, wal = samples[-1]["done_total"], samples[-1]["wal_position"]
            if not args.json:
                print(row(len(samples), samples[-1]), flush=True)
        producer.stopping.set()
        producer.join()
        deadline = time.monotonic() + 300
        final = jobq.counts(conn=conn)
        while in_queue(final) and time.monotonic() < deadline:
            time.sleep(0.5)
            final = jobq.counts(conn=conn)
    enqueued, finished = final.totals.get("enqueued_total", 0), final.totals.get("done_total", 0)
    waiting = in_queue(final)
    # A finished job goes once its whole partition is past the retention (schema 13).
    retention_samples = math.ceil((args.retention + args.partition_interval) / args.sample_seconds) + 1
    # Every WINDOW samples' p99 in turn: how far apart two windows of the same run are
    # anyway, beside the first and last ones the verdict compares (the first is the
    # first of these; the last, the last WINDOW samples whatever their count).
    p99_windows = [pooled_p99(samples[at:at + WINDOW]) for at in range(0, max(len(samples) - WINDOW, 0) + 1, WINDOW)]
    p99_first_last = [p99_windows[0], pooled_p99(samples[-WINDOW:])]
    return {
        "rate_per_s": round(rate),
        "measured_drain_per_s": measured,
        "minutes": args.minutes,
        "sample_seconds": args.sample_seconds,
        "retention_s": args.retention,
        "workers": args.workers,
        "producer_sent": producer.sent,
        "producer_behind_s": round(producer.behind, 3),
        "enqueued_total": enqueued,
        "done_total": finished,
        "still_waiting": waiting,  # a backlog the 5 minutes after the producer stopped did not drain
        "samples": samples,
        "p99_first_last_ms": p99_first_last,
        "p99_windows_ms": p99_windows,
        "holds": verdict(samples, p99_first_last, retention_samples, enqueued - finished - waiting),
    }


HEADER = (
    "| sample | drain/s | backlog | p50 ms | p99 ms | p99 to claim / in batch ms | table MB | indexes MB "
    "| dead tuples | WAL MB | oldest xact s | RSS MB (supervisor / maintenance / worker max) |\n|" + "---|" * 12
)


def row(index: int, s: dict) -> str:
    rss = s["rss_mb"]
    return (
        f"| {index} | {s['drain_per_s']:,} | {s['backlog']:,} | {s['p50_ms']} | {s['p99_ms']} "
        f"| {s['p99_to_claim_ms']} / {s['p99_in_batch_ms']} | {s['table_mb']} | {s['indexes_mb']} "
        f"| {s['dead_tuples']:,} | {s['wal_mb']} | {s['oldest_xact_s']} "
        f"| {rss['supervisor']} / {rss['maintenance']} / {rss['worker_max']} |"
    )


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    minutes = [(i + 1) * result["sample_seconds"] / 60 for i in range(len(samples))]
    fig, axes = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
    axes[0].plot(minutes, [s["drain_per_s"] for s in samples], "o-")
    axes[0].set_ylabel("drained jobs/s")
    axes[1].plot(minutes, [s["p50_ms"] for s in samples], "o-", label="p50")
    axes[1].plot(minutes, [s["p99_ms"] for s in samples], "s-", label="p99")
    axes[1].set_ylabel("enqueue -> start, ms")
    axes[1].legend()
    axes[2].plot(minutes, [s["table_mb"] for s in samples], "o-", label="jobs table")
    axes[2].plot(minutes, [s["indexes_mb"] for s in samples], "s-", label="its indexes")
    axes[2].set_ylabel("MB on disk")
    axes[2].set_xlabel("minutes")
    axes[2].legend()
    fig.suptitle(f"Soak: {result['rate_per_s']:,} jobs/s offered, retention {result['retention_s']:g} s")
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=float, help="jobs/s offered (default: 70%% of a drain measured first)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--retention", type=float, default=120, help="JOBQ_RETENTION of the workers, seconds")
    parser.add_argument("--partition-interval", type=float, default=60,
                        help="JOBQ_PARTITION_INTERVAL of the workers, seconds (schema 13 and later)")
    parser.add_argument("--sample-seconds", type=float, default=60)
    parser.add_argument("--sample-percent", type=float, default=SAMPLE_PERCENT,
                        help="the share of the table's pages each sample reads for the latencies")
    parser.add_argument("--plot", type=Path)
    args = parse(parser)

    with database(args.database_url) as url:
        migrated(url)
        if not args.json:
            print(HEADER, flush=True)
        result = {**environment(), **soak(url, args)}
    if args.plot:
        plot(result, args.plot)
    if args.json:
        emit(result, True)
        return
    print(
        f"offered {result['rate_per_s']:,} jobs/s for {args.minutes:g} min "
        f"(producer at most {result['producer_behind_s']} s behind); "
        f"enqueued {result['enqueued_total']:,}, done {result['done_total']:,}, "
        f"still waiting {result['still_waiting']:,}"
    )
    first, last = result["p99_first_last_ms"]
    print(f"p99 of the first {WINDOW} samples' jobs {first} ms, of the last {WINDOW}' {last} ms")
    print(f"p99 of each {WINDOW} samples' jobs in turn: {', '.join(f'{p99:g}' for p99 in result['p99_windows_ms'])} ms")
    for condition, holds in result["holds"].items():
        print(f"{condition}: {'holds' if holds else 'DOES NOT HOLD'}")


if __name__ == "__main__":
    main()
