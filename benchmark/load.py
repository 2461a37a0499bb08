"""Throughput and latency of the whole system with noop jobs.

    python benchmark/load.py --jobs 10000 --concurrency 50 --workers 2
                             [--mode http|batch|library] [--batch 1000]
                             [--api-url URL --database-url URL --no-workers]
                             [--sweep-workers 1,2,4] [--plot-dir DIR] [--json]

N noop jobs go in through the HTTP API (single ``POST /jobs`` requests from C
concurrent clients, or ``/jobs/batch``) or through ``jobq.enqueue_many``, while W
worker processes drain them. Reported:
- the enqueue rate (client side: first request sent to last answer received);
- the drain rate (database clock: first claim to last completion);
- end-to-end jobs/s, measured honestly: from the first enqueue to the last
  completion, both from the database (created_at, completed_at), so the time spent
  enqueuing counts;
- latency percentiles enqueue -> start and enqueue -> done (database clock).
Without URLs it starts its own embedded PostgreSQL (default settings), Gunicorn as the
Procfile does, and the workers. Each run empties the jobq tables of the database it
uses first: point --database-url at a database of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from pathlib import Path

import psycopg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import client
import jobq
import stack
from common import database, emit, environment, migrated, parse, percentiles, reset, save_figure

# Each run starts from empty tables, so every row is one of its jobs.
TIMINGS = (
    "SELECT extract(epoch FROM min(created_at)), extract(epoch FROM max(completed_at)), "
    "extract(epoch FROM min(claimed_at)), count(*) FILTER (WHERE status = 'done'), count(*) FROM jobs"
)
LATENCIES = (
    "SELECT extract(epoch FROM started_at - created_at), extract(epoch FROM completed_at - created_at) "
    "FROM jobs WHERE status = 'done'"
)


def run_once(args: argparse.Namespace, url: str, api: str | None, workers: int) -> dict:
    reset(url)
    bodies = [{"type": "noop", "payload": {"i": i}} for i in range(args.jobs)]
    with contextlib.ExitStack() as stop:
        if workers:
            stop.enter_context(stack.workers(url, workers))
            time.sleep(1.5)  # booted and idle
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            transient=args.json, disable=args.json,
        ) as progress:
            sent = progress.add_task("enqueued", total=args.jobs)
            done = progress.add_task("done    ", total=args.jobs)

            def report(enqueued: int, finished: int) -> None:
                progress.update(sent, completed=enqueued)
                progress.update(done, completed=finished)

            watcher = Watcher(url, report)
            watcher.start()
            started = time.perf_counter()
            enqueue(args, url, api, bodies, watcher)
            enqueue_seconds = time.perf_counter() - started
            with psycopg.connect(url) as conn:
                total = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
            progress.update(sent, total=total)
            progress.update(done, total=total)
            watcher.until(total, timeout=args.timeout)
    with psycopg.connect(url) as conn:
        first, last, first_claim, n_done, n_jobs = conn.execute(TIMINGS).fetchone()
        rows = conn.execute(LATENCIES).fetchall()
    if n_done != n_jobs or n_jobs < args.jobs * 0.99:
        raise SystemExit(f"only {n_done} of {n_jobs} jobs done within {args.timeout} s")
    start_ms = [float(r[0]) * 1000 for r in rows]
    done_ms = [float(r[1]) * 1000 for r in rows]
    return {
        "mode": args.mode,
        "client": args.client if args.mode == "http" else "-",
        "jobs": n_jobs,
        "concurrency": args.concurrency,
        "workers": workers,
        "enqueue_per_s": round(n_jobs / enqueue_seconds),
        "drain_per_s": round(n_jobs / float(last - first_claim)),
        "end_to_end_per_s": round(n_jobs / float(last - first)),
        "end_to_end_seconds": round(float(last - first), 3),
        "enqueue_to_start_ms": {k: round(v, 2) for k, v in percentiles(start_ms, (50, 95, 99)).items()},
        "enqueue_to_done_ms": {k: round(v, 2) for k, v in percentiles(done_ms, (50, 95, 99)).items()},
        "_done_ms": done_ms,
    }


def enqueue(args: argparse.Namespace, url: str, api: str | None, bodies: list[dict], watcher: Watcher) -> None:
    if args.mode == "library":
        with psycopg.connect(url, autocommit=True) as conn:
            for i in range(0, len(bodies), args.batch):
                jobq.enqueue_many(bodies[i : i + args.batch], conn=conn)
        return
    assert api is not None
    if args.mode == "http" and args.client == "wrk":
        client.submit_with_wrk(
            api, {"type": "noop"}, len(bodies), concurrency=args.concurrency, enqueued=lambda: watcher.enqueued
        )
        return
    batch = args.batch if args.mode == "batch" else 0
    client.submit(api, bodies, concurrency=args.concurrency, batch=batch, answers=False)


class Watcher(threading.Thread):
    """Follows the counters (cheap: job_counters) for the progress bars."""

    def __init__(self, url: str, report) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.url, self.report = url, report
        self.stop = threading.Event()
        self.enqueued = self.done = 0

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.wait(0.02):
                counts = jobq.counts(conn=conn)
                self.enqueued, self.done = counts.totals.get("enqueued_total", 0), counts.depth["done"]
                self.report(self.enqueued, self.done)

    def until(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.done < n and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stop.set()
        self.join()


def show(results: list[dict]) -> None:
    table = Table(title="jobq load benchmark (noop jobs)")
    for column in ("mode", "client", "C", "W", "enqueue/s", "drain/s", "end-to-end/s", "enq->start p50/p95/p99 ms", "enq->done p50/p95/p99 ms"):
        table.add_column(column, justify="right")
    for r in results:
        s, d = r["enqueue_to_start_ms"], r["enqueue_to_done_ms"]
        table.add_row(
            r["mode"], r["client"], str(r["concurrency"]), str(r["workers"]), f"{r['enqueue_per_s']:,}", f"{r['drain_per_s']:,}",
            f"{r['end_to_end_per_s']:,}", f"{s['p50']}/{s['p95']}/{s['p99']}", f"{d['p50']}/{d['p95']}/{d['p99']}",
        )
    Console().print(table)


def plot(results: list[dict], directory: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(results) > 1:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot([r["workers"] for r in results], [r["end_to_end_per_s"] for r in results], "o-", label="end to end")
        ax.plot([r["workers"] for r in results], [r["drain_per_s"] for r in results], "s--", label="drain")
        ax.set_xlabel("worker processes")
        ax.set_ylabel("jobs/s")
        ax.set_title(f"Throughput against worker count ({results[0]['mode']}, C={results[0]['concurrency']})")
        ax.legend()
        save_figure(fig, directory / f"throughput_vs_workers_{results[0]['mode']}.png")
    fig, ax = plt.subplots(figsize=(7, 4))
    best = max(results, key=lambda r: r["end_to_end_per_s"])
    ax.hist(best["_done_ms"], bins=80)
    ax.set_xlabel("enqueue -> done (ms)")
    ax.set_ylabel("jobs")
    ax.set_title(f"Latency distribution ({best['mode']}, {best['jobs']:,} jobs, W={best['workers']})")
    save_figure(fig, directory / f"latency_distribution_{best['mode']}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sweep-workers", help="comma-separated worker counts, one run each")
    parser.add_argument("--mode", choices=("http", "batch", "library"), default="http")
    parser.add_argument("--client", choices=("auto", "python", "wrk"), default="auto",
                        help="for single requests: wrk if installed (auto), else aiohttp")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--api-url")
    parser.add_argument("--no-workers", action="store_true", help="the deployment at --api-url runs its own")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--plot-dir", type=Path)
    args = parse(parser)
    if args.client == "auto":
        args.client = "wrk" if client.wrk_available() else "python"
    if args.api_url and not args.database_url:
        parser.error("--api-url needs --database-url: the timings are read from the jobs table")

    counts = [int(w) for w in args.sweep_workers.split(",")] if args.sweep_workers else [args.workers]
    with database(args.database_url) as url:
        migrated(url)
        with contextlib.ExitStack() as stop:
            api = args.api_url
            if api is None and args.mode != "library":
                api = stop.enter_context(stack.gunicorn(url))
            results = [run_once(args, url, api, 0 if args.no_workers else w) for w in counts]
    if args.plot_dir:
        plot(results, args.plot_dir)
    for r in results:
        r.pop("_done_ms")
    if args.json:
        emit({**environment(), "runs": results}, True)
    else:
        show(results)


if __name__ == "__main__":
    main()
