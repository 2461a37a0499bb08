"""What the seed's math-benchmark client can send on this machine: its way of
enqueueing (an ``httpx.AsyncClient`` with default limits, a semaphore of 30, one
``POST /jobs`` per job, each answer parsed) timed against a server that does nothing
and against jobq, in alternating rounds so that both see the same machine.

    python benchmark/client_ceiling.py [--jobs 600] [--rounds 5] [--concurrency 30]
                                       [--workers 2] [--database-url URL] [--json]

The server that does nothing is Gunicorn with ``deploy/gunicorn.conf.py`` (the same
worker class, processes, threads and access log as jobq's) serving ``null_app.py``.
jobq is Gunicorn with jobq's app and ``jobq worker`` as the Procfile starts them, on
an embedded PostgreSQL 16 with its default settings unless a URL is given; it runs
the math benchmark's jobs while they arrive, as in the seed's benchmark. The client
runs in this process; its CPU time per request is reported too. The seed's client
reads the time after the last answer and then polls the table once a second, so its
end-to-end figure is at most its enqueue rate (when every job is finished at its
first poll) and falls by a second's worth otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import httpx

import stack
from common import database, emit, environment, migrated, parse, reset
from math_benchmark import make_jobs


async def enqueue(base: str, bodies: list[dict[str, Any]], concurrency: int) -> int:
    """POST each body to ``base``/jobs as the seed's client does; the number answered 2xx."""
    limit = asyncio.Semaphore(concurrency)
    answered = 0

    async def post(http: httpx.AsyncClient, body: dict[str, Any]) -> None:
        nonlocal answered
        async with limit:
            response = await http.post("/jobs", json=body, timeout=10.0)
            if response.status_code in (200, 201):
                response.json()
                answered += 1

    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        await asyncio.gather(*(post(http, body) for body in bodies))
    return answered


def timed_round(base: str, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, float]:
    """Requests per second and the client's CPU milliseconds per request of one round."""
    wall, cpu = time.perf_counter(), time.process_time()
    answered = asyncio.run(enqueue(base, bodies, concurrency))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if answered != len(bodies):
        raise SystemExit(f"{len(bodies) - answered} of {len(bodies)} requests to {base} were not answered 2xx")
    return {"requests_per_s": len(bodies) / wall, "client_cpu_ms_per_request": 1000 * cpu / len(bodies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=600, help="requests per round (the seed's run: 600)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=30, help="requests in flight (the seed's default: 30)")
    parser.add_argument("--workers", type=int, default=2, help="jobq worker processes (default: one per core)")
    args = parse(parser)

    bodies = [body for body, _ in make_jobs(args.jobs, random.Random(7))]
    rounds: dict[str, list[dict[str, float]]] = {"null": [], "jobq": []}
    with database(args.database_url) as url:
        migrated(url)
        with (stack.gunicorn(url, app="null_app:app", env={"PYTHONPATH": str(stack.ROOT / "benchmark")}) as null,
              stack.gunicorn(url) as jobq, stack.workers(url, args.workers)):
            for _ in range(args.rounds):
                rounds["null"].append(timed_round(null, bodies, args.concurrency))
                reset(url)
                rounds["jobq"].append(timed_round(jobq, bodies, args.concurrency))
            reset(url)

    def summary(name: str) -> dict[str, Any]:
        rates = [r["requests_per_s"] for r in rounds[name]]
        return {
            "requests_per_s": round(statistics.median(rates)),
            "rounds": [round(x) for x in rates],
            "client_cpu_ms_per_request": round(statistics.median(r["client_cpu_ms_per_request"] for r in rounds[name]), 2),
        }

    result = {**environment(), "jobs": args.jobs, "concurrency": args.concurrency, "workers": args.workers,
              "null_server": summary("null"), "jobq": summary("jobq")}
    result["jobq_share_of_null"] = round(result["jobq"]["requests_per_s"] / result["null_server"]["requests_per_s"], 2)
    if args.json:
        emit(result, True)
        return
    for label, key in (("server that does nothing", "null_server"), ("jobq (web + workers)", "jobq")):
        entry = result[key]
        print(f"{label:<26} {entry['requests_per_s']:>5} requests/s  (rounds: {entry['rounds']}; "
              f"client CPU {entry['client_cpu_ms_per_request']} ms/request)")
    print(f"jobq / nothing: {result['jobq_share_of_null']}")


if __name__ == "__main__":
    main()
