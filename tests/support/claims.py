"""Claiming jobs and recording their outcomes through jobq.jobs.leases, in the test
process, as a worker does (no daemon runs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import psycopg

import jobq
from jobq.jobs import leases
from jobq.limits import claims as limited
from jobq.store import connections
from jobq.store import locks
from jobq.handlers import execution
from jobq.handlers import registry
from jobq.settings import DEFAULT_ADVISORY_NAMESPACE

T = TypeVar("T")

registry.load([])  # the built-in handlers, as a worker loads them

LOCK_BASE = locks.key(DEFAULT_ADVISORY_NAMESPACE, 0)


def sent_again(conn: psycopg.Connection, send: Callable[[], T]) -> T:
    """``send()`` sent again while it meets a job that moved to another partition
    meanwhile (finished by another session after its snapshot), as often as the
    worker's session sends a write again (leases.changed_meanwhile)."""
    return connections.sent_again_if_moved(conn, send, retries=leases.WRITE_AGAIN_RETRIES)


def claim(
    conn: psycopg.Connection, limit: int = 10, queues: Sequence[str] = ("default",), worker_id: str = "test"
) -> list[leases.Claim]:
    return sent_again(
        conn, lambda: leases.claim(conn, queues, worker_id=worker_id, limit=limit, lock_base=LOCK_BASE).result()
    )


def complete(conn: psycopg.Connection, claimed: Sequence[leases.Claim]) -> set[int]:
    """Record every claimed job as done with {"ok": true}; returns the rejected ids."""
    n = len(claimed)
    return sent_again(
        conn, lambda: leases.complete(conn, claimed, ['{"ok":true}'] * n, [0.0] * n, lock_base=LOCK_BASE).result()
    )



def claim_under_limits(
    conn: psycopg.Connection, *, worker: str = "a", limit: int = 50, queues: Sequence[str] = ("default",),
    freed: Sequence[leases.Claim] = (),
) -> list[leases.Claim]:
    """A worker's claim under limits (jobq.limits.claims), passing on the slots of ``freed``
    (claims whose outcomes the caller's transaction has just written)."""
    return limited.claim(conn, list(queues), worker_id=worker, limit=limit, lock_base=LOCK_BASE, freed=freed).result()


def keyed(conn: psycopg.Connection, *keys: str, **options: object) -> list[int]:
    """Noop jobs, one a key given, in that order, each with ``options``; their ids."""
    jobs = [{"type": "noop", "concurrency_key": k, **options} for k in keys]
    return [job.id for job in jobq.enqueue_many(jobs, conn=conn)]


def complete_freeing_slots(conn: psycopg.Connection, claimed: Sequence[leases.Claim]) -> None:
    """A worker's outcome of jobs claimed under limits (jobq.limits.claims): done, and
    their slots freed, in one transaction."""
    with conn.transaction():
        limited.release_slots(conn, limited.slotted(claimed))
        complete(conn, claimed)


def fail(
    conn: psycopg.Connection, claimed: Sequence[leases.Claim], error: str = "boom", delay: float = 0.0
) -> tuple[list[leases.RecordedFailure], set[int]]:
    n = len(claimed)
    return sent_again(
        conn, lambda: leases.fail(conn, claimed, [error] * n, [delay] * n, [0.0] * n, lock_base=LOCK_BASE).result()
    )


def run_claimed(conn: psycopg.Connection, claimed: Sequence[leases.Claim], delay: float = 0.0) -> None:
    """Run each claimed job's handler and record its outcome, as a worker would."""
    for c in claimed:
        outcome = execution.run(c.job, registry.find(c.job.type))
        if outcome.ok:
            leases.complete(conn, [c], [outcome.result_json], [outcome.seconds], lock_base=LOCK_BASE).result()
        else:
            leases.fail(conn, [c], [outcome.error], [delay], [outcome.seconds], lock_base=LOCK_BASE).result()


def drain(conn: psycopg.Connection, queues: Sequence[str] = ("default",), batch: int = 50) -> int:
    """Run every due job (retries with delay 0 are due at once) until none is left."""
    ran = 0
    while claimed := claim(conn, batch, queues):
        run_claimed(conn, claimed)
        ran += len(claimed)
    return ran


def settle(conn: psycopg.Connection, claimed: leases.Claim, status: str) -> None:
    """Take a job just claimed on to ``status``: claimed (left as is), running, done, or
    dead (a failure, for a job with no retries left)."""
    if status == "running":
        leases.start(conn, [claimed], [0.0]).result()
    elif status == "done":
        complete(conn, [claimed])
    elif status == "dead":
        fail(conn, [claimed])

