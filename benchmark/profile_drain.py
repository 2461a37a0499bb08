"""Where a worker's CPU goes while it drains: a drain of noop jobs sampled by py-spy,
each sample put in the part of the worker it was taken in, as CPU per job.

    python benchmark/profile_drain.py --jobs 100000 --workers 2 --claim-batch 50 500 [--rate 250]
                                      [--database-url URL] [--raw DIR] [--json]

For each claim size (JOBQ_CLAIM_BATCH): enqueue N noop jobs, start `jobq worker
--concurrency W`, attach `py-spy record --subprocesses` to the supervisor once the
first job is done, stop it when the last is. py-spy counts only samples of a thread
that is running or runnable (not waiting in a system call), so the table is CPU, not
wall time; on a loaded machine a runnable thread waiting for a core counts too, so
compare the parts of one run with each other, not runs with runs.

A sample's part is decided by its innermost frame in jobq that names one of the
worker's steps (PARTS); a thread other than a worker's main thread is a part of its
own (the heartbeat, the lifeline, the supervisor's threads); a sample of a thread
blocked in a lock or event wait is left out (WAITS). Transactions per 1,000
jobs (pg_stat_database.xact_commit) stand in for round trips: a claim with the last
batch's outcomes is one transaction sent as one pipeline.

Needs py-spy (`pip install py-spy`) and the right to trace the workers (root, or
kernel.yama.ptrace_scope = 0).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psycopg

import jobq
import stack
from common import database, emit, environment, migrated, parse, reset
from drain import wait_done

# (where the frame is, the part it stands for): the first frame, from the innermost
# outwards, whose "function (file" text contains the pattern names the sample's part.
PARTS: tuple[tuple[str, str], ...] = (
    ("WorkerLoop.report", "supervisor pipe"),
    ("(jobq/daemon/messages.py", "supervisor pipe"),
    ("(jobq/observe/tracing.py", "tracing"),
    ("decide (jobq/daemon/worker/outcomes.py", "decide the outcome"),
    ("(jobq/daemon/worker/outcomes.py", "write outcomes"),
    ("claim (jobq/jobs/leases.py", "claim"),
    ("(jobq/jobs/leases.py", "claim"),
    ("next_run_in (jobq/", "claim"),
    ("(jobq/handlers/execution.py", "call the handler"),
    ("(jobq/daemon/worker/flight.py", "in-flight bookkeeping"),
    ("(jobq/daemon/boards/", "boards (shared memory)"),
    ("Queues.refresh", "queue list refresh"),
    ("(jobq/daemon/worker/session.py", "claim session"),
    ("wait_for_work (jobq/daemon/worker/loop.py", "idle wait"),
    ("boot (jobq/daemon/worker/loop.py", "boot"),
    ("(jobq/daemon/worker/loop.py", "worker loop"),
)
# A thread blocked on a lock or an event with a timeout is sometimes sampled as running
# (py-spy reads the thread's state without stopping it): such a sample is a wait, not CPU.
WAITS = ("Condition.wait (threading.py", "Condition._acquire_restore (threading.py", "Event.wait (threading.py")


def part_of(stack_line: str) -> tuple[str, str]:
    """(process kind, part) of one line of py-spy's raw output (frames outermost first,
    then a space and the count)."""
    frames = stack_line.split(";")
    processes = [f for f in frames if f.startswith("process ")]
    thread = next((f for f in frames if f.startswith("thread ")), "thread (?): ?")
    thread_name = thread.split(": ", 1)[-1]
    kind = "worker" if len(processes) > 1 else "supervisor"
    if frames[-1].startswith(WAITS):
        return "waiting", thread_name
    if kind == "supervisor":
        return kind, f"supervisor: {thread_name}"
    if thread_name != "MainThread":
        return kind, f"thread {thread_name}"
    for frame in reversed(frames):
        for pattern, part in PARTS:
            if pattern in frame:
                return kind, part
    return kind, "other (imports, start, exit)"


def tally(raw: str) -> Counter[tuple[str, str]]:
    samples: Counter[tuple[str, str]] = Counter()
    for line in raw.splitlines():
        stack_text, _, count = line.rpartition(" ")
        if stack_text:
            samples[part_of(stack_text)] += int(count)
    return samples


def commits(conn: psycopg.Connection) -> int:
    (n,) = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(n)


def py_spy() -> str:
    """py-spy's path: on PATH, or beside this Python (a virtualenv not activated)."""
    beside = Path(sys.executable).with_name("py-spy")
    found = shutil.which("py-spy") or (str(beside) if beside.exists() else None)
    if found is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    return found


def profile(url: str, n: int, workers: int, claim_batch: int, rate: int, raw_dir: Path) -> dict:
    reset(url)
    raw = raw_dir / f"claim-{claim_batch}.txt"
    with psycopg.connect(url, autocommit=True) as conn:
        for start in range(0, n, 10_000):
            jobq.enqueue_many([{"type": "noop"}] * min(10_000, n - start), conn=conn)
        env = {"JOBQ_LOG_LEVEL": "WARNING", "JOBQ_CLAIM_BATCH": str(claim_batch)}
        with stack.workers(url, workers, env=env, log_name=f"profile-{claim_batch}") as supervisor:
            wait_done(conn, 1, timeout=60)
            before = commits(conn)
            done_before = jobq.counts(conn=conn).depth["done"]
            spy = subprocess.Popen(
                [py_spy(), "record", "--pid", str(supervisor.pid), "--subprocesses", "--threads", "--nonblocking",
                 "--format", "raw", "--rate", str(rate), "--output", str(raw)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            started = time.monotonic()
            wait_done(conn, n, timeout=900)
            seconds = time.monotonic() - started
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
            jobs = n - done_before
            transactions = commits(conn) - before
    samples = tally(raw.read_text())
    waits = {part: count for (kind, part), count in samples.items() if kind == "waiting"}
    per_job_us = {
        f"{kind}: {part}": round(count / rate / jobs * 1e6, 1)
        for (kind, part), count in samples.most_common() if kind != "waiting"
    }
    return {
        "claim_batch": claim_batch,
        "jobs_sampled": jobs,
        "seconds": round(seconds, 2),
        "jobs_per_s": round(jobs / seconds),
        "transactions_per_1000_jobs": round(transactions / jobs * 1000, 1),
        "samples": sum(samples.values()) - sum(waits.values()),
        "wait_samples_by_thread": waits,
        "cpu_us_per_job": per_job_us,
    }


def report(result: dict) -> None:
    print(
        f"\nclaim batch {result['claim_batch']}: {result['jobs_sampled']} jobs sampled in {result['seconds']} s "
        f"({result['jobs_per_s']} jobs/s while sampled), {result['transactions_per_1000_jobs']} transactions "
        f"per 1,000 jobs, {result['samples']} samples"
    )
    total = sum(result["cpu_us_per_job"].values())
    print(f"  {'part':<48} {'CPU µs/job':>10} {'share':>6}")
    for part, us in result["cpu_us_per_job"].items():
        print(f"  {part:<48} {us:>10.1f} {us / total:>6.0%}")
    print(f"  {'total':<48} {total:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--claim-batch", type=int, nargs="+", default=[50, 500])
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second per thread")
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw stacks (flamegraph input) in this folder")
    args = parse(parser)
    py_spy()
    raw_dir = args.raw or Path(tempfile.mkdtemp(prefix="jobq-profile-"))
    raw_dir.mkdir(parents=True, exist_ok=True)
    results = []
    with database(args.database_url) as url:
        migrated(url)
        for size in args.claim_batch:
            result = profile(url, args.jobs, args.workers, size, args.rate, raw_dir)
            results.append(result)
            if not args.json:
                report(result)
    if not args.json:
        print(f"\nraw stacks in {raw_dir}")
    emit({"environment": environment(), "workers": args.workers, "results": results}, args.json)


if __name__ == "__main__":
    main()
