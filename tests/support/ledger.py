"""A ledger of handler runs kept in a file, not in the database: it must keep counting
while the database restarts or a host is cut off from it.

The ``held`` handler (support.handlers) appends one line when it starts and one when it
ends (``start``/``end``, job id, attempt, host, pid, wall-clock time, how it ended); a
run whose worker was killed has no end line; a run stopped before it wrote its start
has only an end line, and is not a run here. One ``os.write`` of a short line to a file
opened with O_APPEND: lines of many processes never interleave. Wall-clock times are
compared only between processes of this one machine.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg

import jobq

ENV = "JOBQ_TEST_LEDGER"  # the ledger file's path, in the workers' environment


def write(event: str, job_id: int, attempt: int, how: str = "-") -> None:
    host = os.environ.get("JOBQ_HOSTNAME", "-")
    line = f"{event} {job_id} {attempt} {host} {os.getpid()} {time.time():.6f} {how}\n"
    fd = os.open(os.environ[ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@dataclass
class Run:
    """One run of a job's handler: started, and ended (None: killed, or still running)."""

    job_id: int
    attempt: int
    host: str
    pid: int
    started: float
    ended: float | None = None
    how: str | None = None  # returned | cancelled


def runs(path: Path) -> list[Run]:
    """Every run the ledger holds, in the order they started (a job run twice by one
    process, its first run stopped and the job taken back by that process later, is two
    runs)."""
    every: list[Run] = []
    running: dict[tuple[int, int], Run] = {}  # by (pid, job id): a process runs one job at a time
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        event, job_id, attempt, host, pid, at, how = line.split()
        key = (int(pid), int(job_id))
        if event == "start":
            running[key] = Run(int(job_id), int(attempt), host, int(pid), float(at))
            every.append(running[key])
        elif key in running:  # (an end without a start: cancelled before its start was written)
            run = running.pop(key)
            run.ended, run.how = float(at), how
    return sorted(every, key=lambda run: run.started)


def overlapping(all_runs: list[Run], now: float | None = None) -> list[tuple[Run, Run]]:
    """Pairs of runs of one job in different processes that ran at the same time (a run
    without an end counts as running until ``now``: a killed worker's end is unknown, so
    a test that counts overlaps kills nothing it does not wait for)."""
    now = time.time() if now is None else now
    by_job: dict[int, list[Run]] = {}
    for run in all_runs:
        by_job.setdefault(run.job_id, []).append(run)
    pairs = []
    for job_runs in by_job.values():
        for i, first in enumerate(job_runs):
            for second in job_runs[i + 1:]:
                if second.started < (first.ended if first.ended is not None else now):
                    pairs.append((first, second))
    return pairs


def per_host(all_runs: list[Run]) -> Counter[str]:
    return Counter(run.host for run in all_runs)


def running_by_host(all_runs: list[Run]) -> Counter[str]:
    """The runs without an end (running, or killed), by host."""
    return Counter(run.host for run in all_runs if run.ended is None)


def tally(name: str, conn: psycopg.Connection, all_runs: list[Run], enqueued: int, **more: int) -> dict[str, int]:
    """The scenario's counts, printed as a row of the table in docs/reliability.md:
    enqueued, done (jobs whose status is done), lost (enqueued and not done), overlapping
    runs (in the ledger), outcomes recorded (``done_total``: more than done is an outcome
    recorded twice), and ``more``."""
    done = conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0]
    counts = {"enqueued": enqueued, "done": done, "lost": enqueued - done,
              "overlapping runs": len(overlapping(all_runs)),
              "recorded done": jobq.counts(conn=conn).totals.get("done_total", 0), **more}
    print(f"\n{name} | " + " | ".join(f"{k} {v}" for k, v in counts.items())
          + f" | runs by host {dict(per_host(all_runs))}")
    return counts
