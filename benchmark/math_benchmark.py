"""A benchmark that checks its answers: is_prime, collatz and sha256_chain jobs whose
results are recomputed here, independently, and compared field by field.

    python benchmark/math_benchmark.py --jobs 600 [--concurrency 20] [--workers 2]
                                       [--api-url URL --database-url URL] [--seed 7] [--json]

Jobs go in through the HTTP API as single ``POST /jobs`` requests (like the seed's
client); results and timestamps are read from the ``jobs`` table. Latency is enqueue
-> done on the database clock; throughput is end to end, from the first enqueue to
the last completion, and also as a client that polls the table once a second (the
seed's) would see it: jobs / whole seconds from its first request until it finds
them all finished. Exits 1 on any incorrect result, failure or timeout. Without URLs
it starts its own embedded PostgreSQL, Gunicorn as the Procfile does, and W workers.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import psycopg

import client
import stack
from common import database, emit, environment, migrated, parse, reset

RESULTS = (
    "SELECT id, type, status, payload, result, extract(epoch FROM completed_at - created_at), "
    "extract(epoch FROM created_at), extract(epoch FROM completed_at) FROM jobs WHERE id = ANY(%(ids)s)"
)
FINISHED = "SELECT count(*) FROM jobs WHERE id = ANY(%(ids)s) AND status IN ('done', 'dead')"
TYPES = ("is_prime", "collatz", "sha256_chain")


# -- the reference answers, written here without looking at jobq's handlers -------------

def expect_is_prime(n: int) -> dict[str, Any]:
    if n < 2:
        return {"n": n, "is_prime": False, "divisors_checked": 0}
    if n % 2 == 0:
        return {"n": n, "is_prime": n == 2, "divisors_checked": 1}
    checked, d, limit = 1, 3, math.isqrt(n)
    while d <= limit:
        checked += 1
        if n % d == 0:
            return {"n": n, "is_prime": False, "divisors_checked": checked}
        d += 2
    return {"n": n, "is_prime": True, "divisors_checked": checked}


def expect_collatz(n: int) -> dict[str, Any]:
    value, steps, peak, total = n, 0, n, n
    while value != 1:
        value = 3 * value + 1 if value & 1 else value >> 1
        steps, peak, total = steps + 1, max(peak, value), total + value
    return {"n": n, "steps": steps, "max_value": peak, "sequence_checksum": total}


def expect_sha256_chain(seed: str, rounds: int) -> dict[str, Any]:
    digest = seed.encode()
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    return {"seed": seed, "rounds": rounds, "final_hash": digest.hex()}


def make_jobs(n: int, rng: random.Random) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(request body, expected result) for n jobs, the three types in turn."""
    jobs = []
    for i in range(n):
        kind = TYPES[i % 3]
        if kind == "is_prime":
            number = rng.randrange(10**6, 10**10)
            jobs.append(({"type": kind, "payload": {"n": number}}, expect_is_prime(number)))
        elif kind == "collatz":
            number = rng.randrange(1, 10**7)
            jobs.append(({"type": kind, "payload": {"n": number}}, expect_collatz(number)))
        else:
            seed, rounds = f"job-{i}-{rng.randrange(10**9)}", rng.randrange(500, 3000)
            jobs.append(({"type": kind, "payload": {"seed": seed, "rounds": rounds}}, expect_sha256_chain(seed, rounds)))
    return jobs


# -- the run -------------------------------------------------------------------------------

def run(args: argparse.Namespace, url: str, api: str) -> dict[str, Any]:
    jobs = make_jobs(args.jobs, random.Random(args.seed))
    started = time.monotonic()
    ids = [job["id"] for job in client.submit(api, [body for body, _ in jobs], concurrency=args.concurrency)]
    expected = dict(zip(ids, (answer for _, answer in jobs)))
    deadline = started + args.timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while conn.execute(FINISHED, {"ids": ids}).fetchone()[0] < len(ids) and time.monotonic() < deadline:
            time.sleep(0.05)
        finished = time.monotonic() - started
        rows = conn.execute(RESULTS, {"ids": ids}).fetchall()
    # What a client that submits, then polls the table once a second (the seed's) sees:
    # the first whole second after its first request at which every job was finished.
    seed_style = len(ids) / math.ceil(finished)
    per_type: dict[str, dict[str, Any]] = defaultdict(lambda: {"total": 0, "correct": 0, "latencies": []})
    correct = incorrect = unfinished = 0
    first, last = min(r[6] for r in rows), max((r[7] for r in rows if r[7] is not None), default=None)
    for job_id, kind, status, _payload, result, latency, _, _ in rows:
        entry = per_type[kind]
        entry["total"] += 1
        if status != "done":
            unfinished += 1
            continue
        entry["latencies"].append(float(latency) * 1000)
        if result == expected[job_id]:
            correct += 1
            entry["correct"] += 1
        else:
            incorrect += 1
    latencies = sorted(ms for e in per_type.values() for ms in e["latencies"])
    return {
        "submitted": len(ids),
        "done": len(ids) - unfinished,
        "failed_or_timed_out": unfinished,
        "correct": correct,
        "incorrect": incorrect,
        "accuracy": correct / len(ids),
        "throughput_per_s": round(len(ids) / float(last - first), 1) if last else 0.0,
        "throughput_polling_each_second_per_s": round(seed_style, 1),
        "latency_ms": quantiles(latencies),
        "types": {
            kind: {"total": e["total"], "correct": e["correct"], **quantiles(sorted(e["latencies"]), ("p50", "p99"))}
            for kind, e in sorted(per_type.items())
        },
    }


def quantiles(values: list[float], names: tuple[str, ...] = ("p50", "p75", "p95", "p99", "max")) -> dict[str, float]:
    if not values:
        return {name: float("nan") for name in names}
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else values * 99
    points = {"p50": cuts[49], "p75": cuts[74], "p95": cuts[94], "p99": cuts[98], "max": values[-1]}
    return {name: round(points[name], 1) for name in names}


def verdict(r: dict[str, Any]) -> str:
    width = 59
    rule = "├" + "─" * width + "┤"
    line = lambda text: "│ " + text.ljust(width - 2) + " │"  # noqa: E731
    lat = r["latency_ms"]
    rows = [
        "┌" + "─" * width + "┐",
        line("Math Benchmark — Verified Results"),
        rule,
        line(f"Jobs submitted            {r['submitted']:>8}"),
        line(f"Jobs completed (done)     {r['done']:>8}"),
        line(f"Jobs failed/timed out     {r['failed_or_timed_out']:>8}"),
        rule,
        line(f"✓ Correct results         {r['correct']:>8}/{r['submitted']}"),
        line(f"✗ Incorrect results       {r['incorrect']:>8}"),
        line(f"Accuracy                  {r['accuracy'] * 100:>12.4f}%"),
        rule,
        line(f"End-to-end throughput     {r['throughput_per_s']:>8.0f} jobs/s"),
        line(f"  as a 1 s poller sees it {r['throughput_polling_each_second_per_s']:>8.0f} jobs/s"),
        *(line(f"{name} latency".ljust(26) + f"{lat[name]:>8.1f} ms") for name in ("p50", "p75", "p95", "p99", "max")),
        rule,
        line("Per-type breakdown"),
        rule,
        *(
            line(f"{kind:13} {t['correct']}/{t['total']} correct  p50={t['p50']:.1f}ms p99={t['p99']:.1f}ms")
            for kind, t in r["types"].items()
        ),
        "└" + "─" * width + "┘",
    ]
    ok = r["incorrect"] == 0 and r["failed_or_timed_out"] == 0
    rows.append("✓ ALL RESULTS MATHEMATICALLY CORRECT" if ok else "✗ SOME RESULTS WRONG OR MISSING")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--api-url")
    args = parse(parser)
    if args.api_url and not args.database_url:
        parser.error("--api-url needs --database-url: results are read from the jobs table")

    with database(args.database_url) as url:
        migrated(url)
        with contextlib.ExitStack() as stop:
            api = args.api_url
            if api is None:
                reset(url)
                api = stop.enter_context(stack.gunicorn(url))
                stop.enter_context(stack.workers(url, args.workers))
                time.sleep(1.5)  # workers booted
            result = run(args, url, api)
    if args.json:
        emit({**environment(), "workers": args.workers, **result}, True)
    else:
        print(verdict(result))
    sys.exit(0 if result["incorrect"] == 0 and result["failed_or_timed_out"] == 0 else 1)


if __name__ == "__main__":
    main()
