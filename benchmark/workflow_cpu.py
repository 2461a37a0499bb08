"""What a fan-out/fan-in costs the database, as server CPU, against the same jobs alone.

    python benchmark/workflow_cpu.py [--width 10000] [--batch 500] [--rounds 2] [--json]

One session plays a worker, in-process: the root's outcome (the release of --width
children) with the next claim, then claims of up to --batch jobs, each with the last
batch's outcomes in one transaction, until the middle steps and the callback are done;
then the same for --width independent noop jobs. What each part cost is its backend's
CPU (/proc/<pid>/stat: 10 ms ticks), which a loaded machine changes far less than wall
time (benchmark/workflows.py). Each round on a fresh embedded PostgreSQL 16 (default
settings), or on --database-url's with its jobs emptied, analysed after the enqueue.
Needs to read the server's /proc (the same host).
"""

from __future__ import annotations

import argparse
import os

import psycopg

import jobq
from common import database, emit, environment, migrated, parse, proc_stat, reset
from jobq.jobs import leases

WORKER = "bench:1:cpu"


def backend_cpu_ms(conn: psycopg.Connection) -> int:
    """The CPU (user + system) the connection's backend has used, in ms."""
    fields = proc_stat(conn.info.backend_pid)
    assert fields is not None, "the server is not on this machine"
    return (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")


def drain(conn: psycopg.Connection, queue: str, batch: int, held: list[leases.Claim]) -> int:
    """Complete ``held`` with the next claim in one transaction, until nothing is claimed."""
    finished = 0
    while True:
        if held:
            leases.complete(conn, held, ["null"] * len(held), [0.0] * len(held), lock_base=0).result()
            finished += len(held)
        held = leases.claim(conn, [queue], worker_id=WORKER, limit=batch, lock_base=0).result()
        conn.commit()
        if not held:
            return finished


def one_round(width: int, batch: int, given: str | None) -> dict[str, int]:
    wf = jobq.Workflow(name="fan-out-fan-in")
    root = wf.add("noop", name="root", queue="fan")
    middle = [wf.add("noop", name=f"m{i}", after=[root], queue="fan") for i in range(width)]
    wf.add("noop", name="sink", after=middle, queue="fan")
    with database(given) as url:  # a fresh embedded server each round, unless one is given
        migrated(url)
        reset(url)
        with psycopg.connect(url, autocommit=True) as setup:
            wf.enqueue(conn=setup)
            jobq.enqueue_many([{"type": "noop", "queue": "alone"}] * width, conn=setup)
            setup.execute("ANALYZE")
            setup.execute("CHECKPOINT")
        with psycopg.connect(url) as conn:
            (first,) = leases.claim(conn, ["fan"], worker_id=WORKER, limit=1, lock_base=0).result()
            conn.commit()
            start = backend_cpu_ms(conn)
            leases.complete(conn, [first], ["null"], [0.0], lock_base=0).result()
            held = leases.claim(conn, ["fan"], worker_id=WORKER, limit=batch, lock_base=0).result()
            conn.commit()
            root_ms = backend_cpu_ms(conn) - start
            start = backend_cpu_ms(conn)
            steps = drain(conn, "fan", batch, held)
            middle_ms = backend_cpu_ms(conn) - start
            start = backend_cpu_ms(conn)
            alone = drain(conn, "alone", batch, [])
            alone_ms = backend_cpu_ms(conn) - start
    if steps != width + 1 or alone != width:
        raise SystemExit(f"finished {steps} steps and {alone} jobs, expected {width + 1} and {width}")
    return {"root_ms": root_ms, "middle_and_sink_ms": middle_ms, "independent_ms": alone_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parse(parser)
    rounds = [one_round(args.width, args.batch, args.database_url) for _ in range(args.rounds)]
    result = {**environment(), "width": args.width, "batch": args.batch, "rounds": rounds}
    if args.json:
        emit(result, True)
        return
    for r in rounds:
        extra_us = (r["middle_and_sink_ms"] - r["independent_ms"]) * 1000 / args.width
        print(f"server CPU: root's outcome {r['root_ms']} ms, {args.width:,} middle steps + sink "
              f"{r['middle_and_sink_ms']} ms, {args.width:,} independent jobs {r['independent_ms']} ms "
              f"({extra_us:.0f} us a middle step more)")


if __name__ == "__main__":
    main()
