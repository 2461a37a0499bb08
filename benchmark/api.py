"""Enqueue throughput of the HTTP API: single ``POST /jobs`` and 1,000-job ``/jobs/batch``.

    python benchmark/api.py [--seconds 10] [--rounds 5] [--connections 32] [--database-url URL] [--json]

Starts Gunicorn exactly as the Procfile's ``web:`` line does (``deploy/gunicorn.conf.py``,
default worker count, threads and pool) on a loopback port, against an embedded
PostgreSQL 16 with its default settings (fsync and synchronous commit on) unless a
URL is given, and drives it with ``wrk`` (``apt-get install wrk``): a C load generator
over keep-alive connections, so the client's own cost stays small. Each round empties
the tables first; the median of the rounds is reported, with the load average before
each round (another process using the CPU shows there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common import database, emit, environment, migrated, reset

ROOT = Path(__file__).resolve().parent.parent
BATCH = 1000

POST_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"type":"noop","payload":{"user":"u42","order":17}}'
"""


def batch_script(path: Path) -> str:
    body = json.dumps(
        {"jobs": [{"type": "noop", "payload": {"i": i, "user": f"u{i % 97}"}, "priority": 1 + i % 10} for i in range(BATCH)]}
    )
    path.write_text(body)
    return f"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{path}", "r")
wrk.body = f:read("*a")
f:close()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def gunicorn(url: str, port: int, log: Path) -> Iterator[str]:
    """Gunicorn as the Procfile runs it; yields its base URL once /health answers."""
    env = {**os.environ, "DATABASE_URL": url, "PORT": str(port)}
    command = ["gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "web.app:create_app()"]
    with open(log, "w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir())
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"gunicorn did not start; see {log}") from None
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--database-url")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")

    singles, batches, loads = [], [], []
    with tempfile.TemporaryDirectory(prefix="jobq-bench-api-") as tmp, database(args.database_url) as url:
        migrated(url)
        post, batch = Path(tmp) / "post.lua", Path(tmp) / "batch.lua"
        post.write_text(POST_SCRIPT)
        batch.write_text(batch_script(Path(tmp) / "batch.json"))
        with gunicorn(url, free_port(), Path(tmp) / "gunicorn.log") as base:
            for _ in range(args.rounds):
                reset(url)
                loads.append(os.getloadavg()[0])
                singles.append(wrk(base + "/jobs", post, args.seconds, args.connections))
                reset(url)
                batches.append(BATCH * wrk(base + "/jobs/batch", batch, args.seconds, min(args.connections, 8)))
            reset(url)
    result = {
        **environment(),
        "cores": os.cpu_count(),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "load_average_before_rounds": [round(x, 2) for x in loads],
        "post_jobs_requests_per_s": round(statistics.median(singles)),
        "post_jobs_rounds": [round(x) for x in singles],
        "batch_jobs_per_s": round(statistics.median(batches)),
        "batch_rounds": [round(x) for x in batches],
    }
    if args.json:
        emit(result, True)
    else:
        print(f"POST /jobs         {result['post_jobs_requests_per_s']:>8,} requests/s  (rounds: {result['post_jobs_rounds']})")
        print(f"POST /jobs/batch   {result['batch_jobs_per_s']:>8,} jobs/s      (rounds: {result['batch_rounds']})")
        print(f"load average before each round: {result['load_average_before_rounds']}")


if __name__ == "__main__":
    main()
