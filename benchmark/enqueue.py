"""enqueue_many against a raw COPY of the same rows into the same table.

    python benchmark/enqueue.py --jobs 20000 --rounds 5 [--per-call 1000] [--peer] [--database-url URL] [--json]

Each round truncates the tables, COPYs N rows (type, queue, payload, priority,
max_retries) straight into ``jobs``, truncates again and enqueues the same N rows
with ``jobq.enqueue_many`` (validation, then a binary COPY under reserved ids; with
``--per-call``, in calls of that many jobs, each committed: 1,000 a call is what the
bulk enqueue peers are compared on). ``--peer``: the peer harness's call instead
(``../shared/peerbench``): jobs ``{"type": "bench_noop", "payload": {}}``, built
inside the timed loop, no ``conn`` (the library's own pool commits each call). The
client's CPU per job (``time.process_time``) is reported beside the rate. Then what
NOTIFY costs: single-job enqueues, one transaction each, from several threads, with the
wake-up notifications on and off (PostgreSQL serialises the commits of transactions
that notify). Medians of the rounds are reported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import psycopg

import jobq
from jobq.store.connections import close_default_pool
from common import database, emit, environment, migrated, parse, reset


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


def enqueue_many(url: str, jobs: list[dict], per_call: int) -> tuple[float, float]:
    """Seconds, and the client's CPU seconds, of enqueuing ``jobs`` ``per_call`` at a time."""
    with psycopg.connect(url) as conn:
        started, cpu = time.perf_counter(), time.process_time()
        for start in range(0, len(jobs), per_call):
            jobq.enqueue_many(jobs[start:start + per_call], conn=conn)
            conn.commit()
        return time.perf_counter() - started, time.process_time() - cpu


def enqueue_many_as_peer(n: int, per_call: int) -> tuple[float, float]:
    """The peer harness's calls (its peer_jobq.py): fresh noop jobs, the default pool."""
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, n, per_call):
        jobq.enqueue_many([{"type": "bench_noop", "payload": {}} for _ in range(min(per_call, n - start))])
    return time.perf_counter() - started, time.process_time() - cpu


def singles(url: str, n: int, threads: int, notify: str) -> float:
    """Single-job enqueues, one transaction each, from ``threads`` connections at once
    (``jobq.notify`` on or off for those sessions): jobs/s."""
    def one_thread(count: int) -> None:
        with psycopg.connect(url, autocommit=True, options=f"-c jobq.notify={notify}") as conn:
            for _ in range(count):
                jobq.enqueue("noop", conn=conn)

    workers = [threading.Thread(target=one_thread, args=(n // threads,)) for _ in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return (n // threads * threads) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-call", type=int, default=0, help="jobs per enqueue_many call (default: all in one)")
    parser.add_argument("--peer", action="store_true", help="enqueue as the peer harness does (noop jobs, default pool)")
    parser.add_argument("--singles", type=int, default=4000, help="single enqueues for the NOTIFY comparison")
    parser.add_argument("--threads", type=int, default=8)
    args = parse(parser)

    jobs = rows(args.jobs)
    per_call = args.per_call or args.jobs
    copy_times, enqueue_times, enqueue_cpu = [], [], []
    with database(args.database_url) as url:
        migrated(url)
        os.environ["DATABASE_URL"] = url  # the default pool's, for --peer
        for _ in range(args.rounds):
            reset(url)
            copy_times.append(raw_copy(url, jobs))
            reset(url)
            seconds, cpu = enqueue_many_as_peer(args.jobs, per_call) if args.peer else enqueue_many(url, jobs, per_call)
            enqueue_times.append(seconds)
            enqueue_cpu.append(cpu)
        close_default_pool()
        single_rates: dict[str, list[float]] = {"on": [], "off": []}
        for _ in range(args.rounds):
            for setting in ("on", "off"):
                reset(url)
                single_rates[setting].append(singles(url, args.singles, args.threads, setting))
        reset(url)
    copy_rate = args.jobs / statistics.median(copy_times)
    enqueue_rate = args.jobs / statistics.median(enqueue_times)
    result = {
        **environment(),
        "jobs": args.jobs,
        "rounds": args.rounds,
        "per_call": per_call,
        "peer_call": args.peer,
        "raw_copy_rows_per_s": round(copy_rate),
        "enqueue_many_jobs_per_s": round(enqueue_rate),
        "ratio": round(enqueue_rate / copy_rate, 3),
        "enqueue_many_client_cpu_us_per_job": round(statistics.median(enqueue_cpu) / args.jobs * 1e6, 2),
        "single_enqueues_threads": args.threads,
        "single_enqueues_per_s_notify_on": round(statistics.median(single_rates["on"])),
        "single_enqueues_per_s_notify_off": round(statistics.median(single_rates["off"])),
    }
    if args.json:
        emit(result, True)
    else:
        print(f"raw COPY       {copy_rate:>10,.0f} rows/s")
        print(
            f"enqueue_many   {enqueue_rate:>10,.0f} jobs/s   ({enqueue_rate / copy_rate:.0%} of COPY; "
            f"client CPU {result['enqueue_many_client_cpu_us_per_job']} us a job)"
        )
        print(
            f"single enqueues, {args.threads} threads: {result['single_enqueues_per_s_notify_on']:,} jobs/s with NOTIFY, "
            f"{result['single_enqueues_per_s_notify_off']:,} without"
        )


if __name__ == "__main__":
    main()
