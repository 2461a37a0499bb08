"""The claim of two checkouts, side by side in the same minutes: scale.py's empty-table
scenario for this checkout and another one, taking turns every --block claims.

    python benchmark/claim_ab.py OTHER_CHECKOUT [--claims 4000] [--block 100]
                                 [--database-url URL] [--json]

Runs of scale.py one after the other on this machine differ by more than what a
change to the claim does (its drain rate went from 13,000 to 24,000 jobs/s between
two runs of the same commit minutes apart). Here each checkout has a database of its
own on one server (the embedded PostgreSQL 16 unless --database-url names one, where
databases named jobq_ab_this and jobq_ab_other are made afresh) and a process of its
own, with that checkout's code; the two take turns through a pair of pipes, a block
of claims each, so that both meet the same moments of the machine. Each claim is of
one job, timed client side, and its job is recorded done, as in scale.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from psycopg import sql

from common import database, emit, environment, parse

HERE = Path(__file__).resolve().parent
SIDES = ("this", "other")


def side(args: argparse.Namespace) -> None:
    """One checkout's turn-taking claims (this file run with --side, that checkout's modules imported)."""
    import jobq
    import scale
    from common import migrated, reset
    from jobq.jobs import leases
    from jobq.store import locks
    from jobq.settings import DEFAULT_ADVISORY_NAMESPACE

    url = args.database_url
    migrated(url)
    reset(url)
    if hasattr(scale, "history_partitions"):  # the partitioned layout's days, as scale.py makes them
        scale.history_partitions(url)
    scale.fill(url, 0, 0, 0)
    base = locks.key(DEFAULT_ADVISORY_NAMESPACE, 0)
    timings = []
    with psycopg.connect(url, autocommit=True) as conn:
        jobq.enqueue_many([{"type": "noop"}] * args.claims, conn=conn)
        for _ in range(0, args.claims, args.block):
            os.read(args.turn[0], 1)
            for _ in range(args.block):
                started = time.perf_counter()
                (got,) = leases.claim(conn, ["default"], worker_id="bench", limit=1, lock_base=base).result()
                timings.append((time.perf_counter() - started) * 1000)
                leases.complete(conn, [got], ['{"ok":true}'], [0.0], lock_base=base).result()
            os.write(args.turn[1], b".")
    print(" ".join(f"{t:.4f}" for t in timings))


def side_database(url: str, name: str) -> str:
    """A fresh database ``name`` on ``url``'s server; its URL."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return psycopg.conninfo.make_conninfo(url, dbname=name)


def compare(url: str, other: Path, claims: int, block: int) -> dict:
    to_this, from_other = os.pipe()  # written by the other side, read by this one
    to_other, from_this = os.pipe()
    checkouts = {"this": HERE.parent, "other": other.resolve()}
    turns = {"this": (to_this, from_this), "other": (to_other, from_other)}
    processes = {
        # -P: the checkout's modules (jobq, scale, common) from PYTHONPATH, not this file's folder
        name: subprocess.Popen(
            [sys.executable, "-P", __file__, "--side", name,
             "--database-url", side_database(url, f"jobq_ab_{name}"), "--claims", str(claims), "--block", str(block),
             "--turn", str(turns[name][0]), str(turns[name][1])],
            pass_fds=turns[name], cwd=checkouts[name] / "benchmark", stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(checkouts[name]), str(checkouts[name] / "benchmark")])},
        )
        for name in SIDES
    }
    os.write(from_other, b".")  # this checkout's turn first
    timings = {}
    for name, process in processes.items():
        out, _ = process.communicate()
        if process.returncode:
            raise SystemExit(f"claim_ab: the side of {checkouts[name]} failed (exit {process.returncode})")
        timings[name] = [float(t) for t in out.split()]
    return {
        "checkouts": {name: str(path) for name, path in checkouts.items()},
        "claims": claims,
        "block": block,
        **{f"{name}_p50_ms": round(statistics.median(timings[name]), 3) for name in SIDES},
        # this minus other, block by block: the same moments of the machine
        "block_p50_difference_ms": [
            round(statistics.median(timings["this"][i:i + block]) - statistics.median(timings["other"][i:i + block]), 3)
            for i in range(0, claims, block)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, nargs="?", help="the other checkout (a directory with jobq/ and benchmark/)")
    parser.add_argument("--claims", type=int, default=4000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--turn", type=int, nargs=2, help=argparse.SUPPRESS)
    args = parse(parser)
    if args.side:
        side(args)
        return
    if args.other is None:
        parser.error("the other checkout is required")
    with database(args.database_url) as url:
        result = {**environment(), **compare(url, args.other, args.claims, args.block)}
    if args.json:
        emit(result, True)
        return
    differences = result["block_p50_difference_ms"]
    print(f"claim p50: this checkout {result['this_p50_ms']} ms, {args.other} {result['other_p50_ms']} ms; "
          f"block by block, this minus other: median {statistics.median(differences):+.3f} ms "
          f"({min(differences):+.3f} to {max(differences):+.3f})")


if __name__ == "__main__":
    main()
