"""Enqueue throughput of the HTTP API: single ``POST /jobs`` and 1,000-job ``/jobs/batch``.

    python benchmark/api.py [--seconds 10] [--rounds 5] [--connections 32] [--database-url URL] [--json]

Starts Gunicorn exactly as the Procfile's ``web:`` line does (``deploy/gunicorn.conf.py``,
default worker count, threads and pool) on a loopback port, against an embedded
PostgreSQL 16 with its default settings (fsync and synchronous commit on) unless a
URL is given, and drives it with ``wrk`` (``apt-get install wrk``): a C load generator
over keep-alive connections, so the client's own cost stays small. Each round empties
the tables first; the median of the rounds is reported, with the CPU time the
hypervisor gave to other machines during each round (on a shared host, rounds that
lost much of it are slower for that reason alone).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql

from common import database, emit, environment, migrated, parse, reset
from stack import gunicorn

BATCH = 1000

POST_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"type":"noop","payload":{"user":"u42","order":17}}'
"""


def batch_script(path: Path) -> str:
    body = json.dumps(
        {"jobs": [{"type": "noop", "payload": {"i": i, "user": f"u{i % 97}"}, "priority": 1 + i % 10}
                  for i in range(BATCH)]}
    )
    path.write_text(body)
    return f"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{path}", "r")
wrk.body = f:read("*a")
f:close()
"""


def stolen_seconds() -> float:
    """CPU time the hypervisor gave to other machines so far (Linux; 0 elsewhere)."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def wrk(url: str, script: Path, seconds: int, connections: int) -> float:
    """Requests per second of successful (2xx) answers."""
    result = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    )
    out = result.stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    failed = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: .*", out)
    if failed or errors:
        print(f"  warning: {failed.group(0) if failed else ''} {errors.group(0) if errors else ''}", file=sys.stderr)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return rate * (total - int(failed.group(1))) / total if failed else rate


def notify(setting: str, url: str) -> None:
    """Turn the enqueue triggers' NOTIFY on or off for new sessions of the database."""
    with psycopg.connect(url, autocommit=True) as conn:
        database = conn.info.dbname
        conn.execute(sql.SQL("ALTER DATABASE {} SET jobq.notify = {}").format(sql.Identifier(database), sql.Literal(setting)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--no-notify", action="store_true",
                        help="SET jobq.notify = off for the database: what NOTIFY costs the enqueues")
    args = parse(parser)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")

    singles, batches, stolen = [], [], []
    with tempfile.TemporaryDirectory(prefix="jobq-bench-api-") as tmp, database(args.database_url) as url:
        migrated(url)
        notify("off" if args.no_notify else "on", url)
        post, batch = Path(tmp) / "post.lua", Path(tmp) / "batch.lua"
        post.write_text(POST_SCRIPT)
        batch.write_text(batch_script(Path(tmp) / "batch.json"))
        with gunicorn(url) as base:
            for _ in range(args.rounds):
                before = stolen_seconds()
                reset(url)
                singles.append(wrk(base + "/jobs", post, args.seconds, args.connections))
                reset(url)
                batches.append(BATCH * wrk(base + "/jobs/batch", batch, args.seconds, min(args.connections, 8)))
                stolen.append(stolen_seconds() - before)
            reset(url)
        notify("on", url)
    result = {
        **environment(),
        "notify": not args.no_notify,
        "cores": os.cpu_count(),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "cpu_seconds_stolen_per_round": [round(x, 1) for x in stolen],
        "post_jobs_requests_per_s": round(statistics.median(singles)),
        "post_jobs_rounds": [round(x) for x in singles],
        "batch_jobs_per_s": round(statistics.median(batches)),
        "batch_rounds": [round(x) for x in batches],
    }
    if args.json:
        emit(result, True)
    else:
        single, rounds = result["post_jobs_requests_per_s"], result["post_jobs_rounds"]
        print(f"POST /jobs         {single:>8,} requests/s  (rounds: {rounds})")
        print(f"POST /jobs/batch   {result['batch_jobs_per_s']:>8,} jobs/s      (rounds: {result['batch_rounds']})")
        print(f"CPU seconds taken by the hypervisor during each round: {result['cpu_seconds_stolen_per_round']}")


if __name__ == "__main__":
    main()
