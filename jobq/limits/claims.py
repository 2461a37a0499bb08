"""The worker's side of flow control: the claim under limits, the release of a claim's
slots with its outcome, and the reaper's sweep of slots whose holder is gone.

A job claimed under a concurrency limit holds a slot (its :class:`Claim` says
``slotted``) until its run ends: the worker frees it in the transaction that records
the job's outcome (or gives it back), fenced by the claim's lease, or its next claim in
that transaction frees it, passing a key's slot on to the key's next job (schema 30); a
slot whose holder died is freed by the reaper, and only once the job's advisory lock
can be taken (its holder's session is gone), never on a stale timestamp alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jobq.jobs.leases import Claim, Deferred, Leased, claimed_job
from jobq.store.connections import Connection
from jobq.store.sql.leases import JOB_UNLOCK
from jobq.store.sql.limits import (
    JOB_CLAIM_LIMITED,
    JOB_CLAIM_LIMITED_PASSING,
    LIMIT_RATE_OPENS_IN,
    LIMIT_SLOTS_LOCK_GONE,
    LIMIT_SLOTS_RELEASE,
    LIMIT_STARTS_PRUNE,
)

# Due jobs a claim under limits reads per queue, at most, looking for ones whose key
# has a free slot: beyond them it takes nothing this time (and looks again).
SCAN_PER_CLAIM = 200


def claim(
    conn: Connection, queues: Sequence[str], *, worker_id: str, limit: int, lock_base: int,
    rate_opens_in: Callable[[float | None], None] | None = None, most: int | None = None,
    freed: Sequence[Leased] = (), pass_on: bool = True,
) -> Deferred[list[Claim]]:
    """Claim up to ``limit`` due jobs of ``queues`` that their queue's and their key's
    limits let start now (see :func:`jobq.jobs.leases.claim` for the rest of the
    contract). Jobs held back stay pending, untouched: no attempt, no snooze.
    ``rate_opens_in``, if given, is told (when the claim is read) the seconds until a
    full rate of one of the queues lets a job start again (None: none is full).
    ``most``, if given, caps ``limit`` (jobq.limits.gate.KEYED_CLAIM).

    ``freed``: jobs whose outcomes the caller's transaction has just written, holding
    slots (:func:`slotted`). The claim frees their slots and, with ``pass_on``, passes
    each one of a key on to the next due job of the same queue and key, which it claims
    first (schema 30): a worker that ran a key's job goes on with that key without
    deciding it again."""
    if most is not None:
        limit = min(limit, most)
    cur = conn.cursor()
    params = {
        "queues": list(queues), "worker_id": worker_id, "limit": limit,
        "scan": max(SCAN_PER_CLAIM, 4 * limit), "lock_base": lock_base,
        "freed_ids": [j.job_id for j in freed], "freed_leases": [j.lease for j in freed],
    }
    if not pass_on:
        release_slots(conn, freed)
    cur.execute(JOB_CLAIM_LIMITED_PASSING if freed and pass_on else JOB_CLAIM_LIMITED, params)
    rates = conn.cursor() if rate_opens_in is not None else None
    if rates is not None:
        rates.execute(LIMIT_RATE_OPENS_IN, {"queues": list(queues)})

    def read() -> list[Claim]:
        if rates is not None and rate_opens_in is not None:
            row = rates.fetchone()
            rate_opens_in(row[0] if row else None)
        claimed = []
        for row in cur.fetchall():
            job = claimed_job(row[:-2])
            claimed.append(Claim(job, job.lease, bool(row[-2]), slotted=bool(row[-1])))  # type: ignore[arg-type]
        return claimed

    return Deferred(read)


def slotted(jobs: Sequence[Leased]) -> list[Leased]:
    """Of ``jobs``, those that hold a slot."""
    return [job for job in jobs if getattr(job, "slotted", False)]


def release_slots(conn: Connection, jobs: Sequence[Leased]) -> Deferred[int] | None:
    """Free the slots of ``jobs`` (by job and the lease of their claim), in the caller's
    transaction, which records their outcome. None
    when none of them holds one (nothing sent)."""
    if not jobs:
        return None
    cur = conn.cursor()
    cur.execute(LIMIT_SLOTS_RELEASE, {"ids": [j.job_id for j in jobs], "leases": [j.lease for j in jobs]})
    return Deferred(lambda: int(cur.fetchone()[0]))  # type: ignore[index]


def sweep_slots(conn: Connection, lock_base: int) -> int:
    """The reaper's pass: free the slots whose job is no longer in flight under their
    lease and whose advisory lock this session can take (its holder is gone); prune the
    starts older than any period. One transaction; returns how many slots were freed."""
    with conn.transaction():
        gone = conn.execute(LIMIT_SLOTS_LOCK_GONE, {"lock_base": lock_base}).fetchall()
        freed = 0
        if gone:
            row = conn.execute(LIMIT_SLOTS_RELEASE, {"ids": [g[0] for g in gone], "leases": [g[1] for g in gone]}).fetchone()
            freed = int(row[0]) if row else 0
            conn.execute(JOB_UNLOCK, {"ids": [g[0] for g in gone], "lock_base": lock_base})
        conn.execute(LIMIT_STARTS_PRUNE)
    return freed
