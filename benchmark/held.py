"""What idle workers cost PostgreSQL while every key they could take is full: --keys keys
at concurrency 1 (a rule held:* = 1), each key's one slot held by a session of this script
(as by a long run), --behind due jobs behind each, `jobq worker --concurrency W` idle, and
jobs of those keys enqueued one a call at --rate a second for --seconds (a notification
each). Reported: PostgreSQL's CPU over those seconds (the server's postmaster and its
processes, from /proc), the claims under limits the workers made while they ran (pg_stat_user_functions, with
track_functions on for their sessions, counted once they have ended; None unless this
script's user is a superuser), and how long a job of a key with its slot free then took to
be done.

    python benchmark/held.py [--keys 1000] [--behind 10] [--rate 100] [--seconds 10] [--workers 2]
                             [--database-url URL] [--json]

A claim under rules on keys that finds every due job held back walks many keys (8.8 ms with
1,000 held); idle workers now answer the notifications of such jobs with one claim a gap
(jobq.limits.gate.HELD_WAKE_FACTOR). The server's processes are read from /proc: run it
with the server on this machine (without --database-url an embedded PostgreSQL 16 is
started for the run).
"""

from __future__ import annotations

import argparse
import os
import time

import psycopg

import jobq
import stack
from common import children_stat, database, emit, environment, migrated, parse, proc_stat, reset
from jobq.limits import claims as limited

CLAIMS = "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions WHERE funcname = 'jobq_claim_limited'"
SUPERUSER = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"


def server_cpu_seconds(conn: psycopg.Connection) -> float:
    """User and system CPU of the server ``conn`` is on, so far: its postmaster, with the
    children it has reaped, and each of its live children (the server on this machine)."""
    backend = proc_stat(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
    assert backend is not None, "the server is not on this machine"
    postmaster = int(backend[1])
    fields = proc_stat(postmaster) or []
    total = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    total += sum(int(child[11]) + int(child[12]) for child in children_stat(postmaster).values())
    return total / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--behind", type=int, default=10)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parse(parser)
    with database(args.database_url) as url:
        migrated(url)
        reset(url)
        with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url, autocommit=True) as holder:
            jobq.set_limit("held:*", concurrency=1, conn=conn)
            keys = [f"held:{i}" for i in range(args.keys)]
            jobq.enqueue_many([{"type": "noop", "concurrency_key": k} for k in keys], conn=conn)
            held = limited.claim(holder, ["default"], worker_id="held.py", limit=args.keys, lock_base=1 << 40).result()
            assert len(held) == args.keys, f"{len(held)} of {args.keys} keys held"
            jobq.enqueue_many([{"type": "noop", "concurrency_key": k} for k in keys * args.behind], conn=conn)
            counted = bool(conn.execute(SUPERUSER).fetchone()[0])
            env = {"JOBQ_LOG_LEVEL": "WARNING", **({"PGOPTIONS": "-c track_functions=all"} if counted else {})}
            claims_before = conn.execute(CLAIMS).fetchone()[0] if counted else 0
            with stack.workers(url, args.workers, env=env, log_name="worker-held"):
                time.sleep(2.0)  # booted, the rule seen, their first claims made
                cpu_before, started, sent = server_cpu_seconds(conn), time.monotonic(), 0
                while (elapsed := time.monotonic() - started) < args.seconds:
                    jobq.enqueue("noop", concurrency_key=keys[sent % args.keys], conn=conn)
                    sent += 1
                    time.sleep(max(0.0, started + sent / args.rate - time.monotonic()))
                cores = (server_cpu_seconds(conn) - cpu_before) / elapsed
                free = jobq.enqueue("noop", concurrency_key="held:free", conn=conn)
                free_at = time.monotonic()
                while jobq.get(free.id, conn=conn).status != "done" and time.monotonic() - free_at < 30:
                    time.sleep(0.01)
                free_s = time.monotonic() - free_at if jobq.get(free.id, conn=conn).status == "done" else None
            time.sleep(1.0)  # the workers' sessions have ended: their counts are in
            conn.execute("SELECT pg_stat_clear_snapshot()")
            claims = conn.execute(CLAIMS).fetchone()[0] - claims_before if counted else None
    result = {
        **environment(), "keys": args.keys, "behind": args.behind, "workers": args.workers, "rate": args.rate,
        "seconds": args.seconds, "notifications": sent, "postgres_cores": round(cores, 2), "claims": claims,
        "free_key_done_s": None if free_s is None else round(free_s, 3),
    }
    if args.json:
        emit(result, True)
        return
    print(f"{args.keys:,} keys held, {args.behind} due jobs behind each, {args.workers} idle workers, "
          f"{sent:,} enqueues at {args.rate:g}/s: PostgreSQL {result['postgres_cores']} cores, "
          f"{claims if claims is not None else 'uncounted'} claims under limits; a free key's job "
          + ("not done in 30 s" if free_s is None else f"done in {free_s:.3f} s"))


if __name__ == "__main__":
    main()
