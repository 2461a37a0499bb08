"""What one claim under limits costs against the plain claim, in one session: the
statement alone, without the workers, the drain or the machine's other load between
them (benchmark/limits.py measures the drain).

    python benchmark/limits_claim.py [--jobs 60000] [--size 50] [--blocks 6] [--database-url URL] [--json]

For each scenario of benchmark/limits.py (its jobs enqueued, its limits set), claims of
--size jobs are timed client side with their commit, taking turns in blocks of 25 with
the plain claim of the same backlog; after each claim its jobs are recorded done and
their slots freed (not timed), as a worker's outcome would. Reported: the median of
each, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg

import jobq
from common import database, emit, environment, migrated, parse, reset
from jobq.jobs import leases
from jobq.limits import claims as limited
from jobq.settings import Settings
from jobq.store import locks
from limits import REFERENCES, SCENARIOS

BLOCK = 25


def timed_claims(conn: psycopg.Connection, claim, n: int, lock_base: int) -> list[float]:
    """Seconds of each of ``n`` claims with their commit; each claim's jobs then done."""
    seconds = []
    for _ in range(n):
        start = time.perf_counter()
        with conn.transaction():
            taken = claim(conn, ["default"], worker_id="bench", limit=SIZE, lock_base=lock_base).result()
        seconds.append(time.perf_counter() - start)
        with conn.transaction():
            limited.release_slots(conn, limited.slotted(taken))
            leases.complete(conn, taken, ["{}"] * len(taken), [0.0] * len(taken), lock_base=lock_base).result()
    return seconds


def scenario(url: str, name: str, jobs: int, blocks: int, lock_base: int) -> dict:
    reset(url)
    with psycopg.connect(url, autocommit=True) as conn:
        rows = SCENARIOS[name](conn, jobs)
        for start in range(0, jobs, 10_000):
            jobq.enqueue_many(rows[start:start + 10_000], conn=conn)
        conn.execute("VACUUM ANALYZE jobs")
    times: dict[str, list[float]] = {"plain": [], "limited": []}
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(blocks):
            times["plain"] += timed_claims(conn, leases.claim, BLOCK, lock_base)
            times["limited"] += timed_claims(conn, limited.claim, BLOCK, lock_base)
    plain, under = (statistics.median(times[k]) * 1000 for k in ("plain", "limited"))
    return {"plain_ms": round(plain, 2), "limited_ms": round(under, 2), "ratio": round(under / plain, 2)}


def main() -> None:
    global SIZE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--size", type=int, default=50)
    parser.add_argument("--blocks", type=int, default=6)
    args = parse(parser)
    SIZE = args.size
    lock_base = locks.key(Settings.from_env({}).advisory_namespace, 0)
    names = [s for s in SCENARIOS if s != "unlimited" and s not in REFERENCES]
    with database(args.database_url) as url:
        migrated(url)
        result = {**environment(), "size": args.size, "scenarios": {
            name: scenario(url, name, args.jobs, args.blocks, lock_base) for name in names}}
    if args.json:
        emit(result, True)
        return
    print(f"claims of {args.size} with their commit, one session ({args.blocks * BLOCK} of each; median ms)")
    for name, figures in result["scenarios"].items():
        print(f"  {name:32} plain {figures['plain_ms']:6.2f}  under limits {figures['limited_ms']:6.2f}  "
              f"{figures['ratio']:.2f}x")


SIZE = 50

if __name__ == "__main__":
    main()
