"""The worker's side of the queue: claim, start, heartbeat, and fenced outcomes.

Every write after the claim presents the lease the claim handed out; a write with a
stale lease changes nothing and is reported back (and counted). Outcome writes take
batches and release the advisory locks of the batch in the same statement.

Each function sends its statement and returns a :class:`Deferred` whose ``result()``
reads the answer. Called one after another they cost a round trip each; inside
``conn.pipeline()`` a worker sends an outcome batch and its next claim together and
then reads both, in one round trip.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

import psycopg
from psycopg import sql

from jobq.store.sql.counters import COUNTER_ADD
from jobq.store.sql.leases import (
    JOB_CLAIM,
    JOB_CLAIM_OF_SEVERAL_QUEUES,
    JOB_HEARTBEAT_IF_LEASED,
    JOB_NEXT_RUN_AT,
    JOB_RELEASE_ORPHANS_OF_WORKER,
    JOB_RELOCK_IF_LEASED,
    JOB_SET_PROGRESS_IF_LEASED,
    JOB_START_IF_LEASED,
    JOB_TAKE_HANDED,
    JOB_TAKE_HANDED_UNHEARD,
)
from jobq.store.sql.outcomes import (
    JOB_CANCEL_IF_LEASED,
    JOB_COMPLETE_IF_LEASED,
    JOB_FAIL_IF_LEASED,
    JOB_GET_FINISHED_UNDER_LEASE,
    JOB_NOTE_FINISHED_IF_CANCELLED,
    JOB_RELEASE_IF_LEASED,
    JOB_SNOOZE_IF_LEASED,
)
from jobq.store import connections
from jobq.store.connections import Connection
from jobq.job import Job

T = TypeVar("T")

STALE_LEASE_COUNTER = "stale_lease_rejections_total"
KEY_HELD_INDEX = "jobs_key_held_idx"
# A write that met a change made meanwhile is sent again this often (changed_meanwhile):
# each try has a new snapshot, so the same change is never met twice, but under load a
# claim may meet another job that moved, try after try.
WRITE_AGAIN_RETRIES = 20


def changed_meanwhile(exc: BaseException) -> bool:
    """Whether a write failed on a change another transaction committed while it ran,
    so that the same write, sent again, sees that change and does the right thing:

    * a key taken while its job ran: a job sent back to pending (retried, snoozed,
      released) whose idempotency key another job took by an insert that had not
      committed yet when the write looked for a holder (migration 0008) fails on
      KEY_HELD_INDEX once that insert commits. No lock was let go
      (jobq.store.sql.outcomes._unlock_after); sent again, the write sees the holder,
      and the job ends cancelled, superseded by it;
    * the partitions moved under it (:func:`jobq.store.connections.moved_meanwhile`, schema 13): a job
      finished, cancelled or deleted by a transaction that committed after this one's
      snapshot left jobs_live, and an update or row lock of it cannot follow it there
      (sent again, the write no longer finds the job in flight under its lease, and
      reports a stale write, or a claim skips it); or a partition was attached while
      the write routed a finishing job to the default partition (sent again, it goes
      to the new partition).

    Either way the transaction rolled back."""
    if connections.moved_meanwhile(exc):
        return True
    return isinstance(exc, psycopg.errors.UniqueViolation) and exc.diag.constraint_name == KEY_HELD_INDEX


class Deferred(Generic[T]):
    """The answer of a statement already sent; ``result()`` waits for it once."""

    __slots__ = ("_read", "_value", "_done")

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._done = False

    def result(self) -> T:
        if not self._done:
            self._value = self._read()
            self._done = True
        return self._value


class Leased(Protocol):
    """What a writer presents to record an outcome: the job, the lease it got at claim
    time, and whether its session holds the job's advisory lock (released by the write)."""

    @property
    def job_id(self) -> int: ...

    @property
    def lease(self) -> int: ...

    @property
    def locked(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Claim:
    """A job this worker claimed, under the lease of that claim, whether its session
    holds the job's advisory lock (false: another session does; never run it), and
    whether it holds a slot of a concurrency limit (:mod:`jobq.limits.claims`: freed
    with its outcome)."""

    job: Job
    lease: int
    locked: bool
    slotted: bool = False

    @property
    def job_id(self) -> int:
        return self.job.id


@dataclass(frozen=True, slots=True)
class RecordedFailure:
    """The outcome of a failed run: retried after ``delay`` seconds or dead-lettered."""

    job_id: int
    status: str  # 'pending' (retry scheduled), 'dead', or 'cancelled' (superseded: see changed_meanwhile)
    attempt: int
    run_at: datetime


def claim(
    conn: Connection, queues: Sequence[str], *, worker_id: str, limit: int, lock_base: int, hand_off: bool = False
) -> Deferred[list[Claim]]:
    """Claim up to ``limit`` due jobs of ``queues``; with ``hand_off``, the worker's row
    says whether it now waits to be handed a job (none claimed) or not (schema 28).

    The jobs come back in claim order (priority, run_at, id), each with a new lease and,
    if ``locked``, its advisory lock held by ``conn``'s session. Raises
    ``SerializationFailure`` when a candidate seen as pending had moved to another
    partition by the time it was locked (see :func:`changed_meanwhile`): no job was
    claimed and no advisory lock taken (the claim's candidates are all locked, in its
    sort, before the first row is updated); send it again.
    """
    cur = conn.cursor()
    queues = list(queues)
    cur.execute(claim_statement(limit, several=len(queues) > 1),
                {"queues": queues, "worker_id": worker_id, "lock_base": lock_base, "hand_off": hand_off})
    return Deferred(lambda: _claims(cur))


def take_handed(
    conn: Connection, handed: Sequence[tuple[int, int]], *, worker_id: str, lock_base: int,
    unheard: Sequence[int] | None = None,
) -> Deferred[list[Claim]]:
    """The jobs handed to this worker by their enqueue (schema 28): those of ``handed``
    (id, lease) still claimed in its name under that lease; with ``unheard`` (the ids it
    holds), every job claimed in its name that it does not hold (handed while it could
    not hear). Each with its advisory lock taken if it can be (as :func:`claim`)."""
    cur = conn.cursor()
    if unheard is not None:
        cur.execute(JOB_TAKE_HANDED_UNHEARD, {"worker_id": worker_id, "lock_base": lock_base, "held": list(unheard)})
    else:
        cur.execute(JOB_TAKE_HANDED, {
            "ids": [job_id for job_id, _ in handed], "leases": [lease for _, lease in handed],
            "worker_id": worker_id, "lock_base": lock_base,
        })
    return Deferred(lambda: _claims(cur))


def _claims(cur: psycopg.Cursor) -> list[Claim]:
    """The rows of a claim (the job's columns, then whether its advisory lock was taken),
    in claim order."""
    jobs = [(claimed_job(row[:-1]), bool(row[-1])) for row in cur.fetchall()]
    claimed = [Claim(job, job.lease, locked) for job, locked in jobs]  # type: ignore[arg-type]
    claimed.sort(key=lambda c: (-c.job.priority, c.job.run_at, c.job.id))
    return claimed


def claimed_job(columns: Sequence[Any]) -> Job:
    """The job of a claim's row (``claimed_columns``): errors the claim read as NULL are
    none, []."""
    job = Job(*columns)
    if job.errors is None:
        job.errors = []
    return job


@functools.lru_cache(maxsize=64)
def claim_statement(limit: int, *, several: bool = False) -> str:
    """JOB_CLAIM for claims of up to ``limit`` jobs of one queue, JOB_CLAIM_OF_SEVERAL_QUEUES
    of more: one statement (and one prepared plan) per claim size; a worker's sizes are
    the powers of two up to its cap."""
    statement = JOB_CLAIM_OF_SEVERAL_QUEUES if several else JOB_CLAIM
    return sql.SQL(statement).format(limit=sql.Literal(limit)).as_string()


def start(conn: Connection, jobs: Sequence[Leased], elapsed: Sequence[float]) -> Deferred[set[int]]:
    """claimed -> running for jobs that started ``elapsed`` seconds ago; the answer is
    the ids whose lease no longer matched (not marked)."""
    cur = conn.cursor()
    cur.execute(JOB_START_IF_LEASED, {**_leases(jobs), "elapsed": list(elapsed)})
    return Deferred(lambda: {leased.job_id for leased in jobs} - {row[0] for row in cur.fetchall()})


def heartbeat(conn: Connection, jobs: Sequence[Leased]) -> Deferred[set[int]]:
    """Touch heartbeat_at of in-flight jobs; the answer is the ids no longer held."""
    cur = conn.cursor()
    cur.execute(JOB_HEARTBEAT_IF_LEASED, _leases(jobs))
    return Deferred(lambda: {leased.job_id for leased in jobs} - {row[0] for row in cur.fetchall()})


def complete(
    conn: Connection, jobs: Sequence[Leased], results: Sequence[str], elapsed: Sequence[float], *, lock_base: int
) -> Deferred[set[int]]:
    """claimed|running -> done with each job's result (JSON text, see
    :func:`jobq.spec.storable_json`); ``elapsed`` is how long each ran (its started_at
    when the worker never wrote one). The answer is the ids whose write was rejected for
    a stale lease."""
    cur = conn.cursor()
    cur.execute(
        JOB_COMPLETE_IF_LEASED,
        {**_locked_params(jobs, lock_base), "results": list(results), "elapsed": list(elapsed)},
    )
    return Deferred(lambda: {row[0] for row in cur.fetchall() if not row[1]})


def fail(
    conn: Connection,
    jobs: Sequence[Leased],
    errors: Sequence[str],
    delays: Sequence[float],
    elapsed: Sequence[float],
    *,
    max_retries: Sequence[int | None] | None = None,
    spans: Sequence[str | None] | None = None,
    lock_base: int,
) -> Deferred[tuple[list[RecordedFailure], set[int]]]:
    """Record failed runs: back to pending after ``delays`` (attempt + 1) while retries
    remain, else dead and copied into dead_letter_jobs. Non-None ``max_retries`` replace
    the row's limit. A job going back to pending whose idempotency key another job took
    while it ran ends cancelled, superseded by that job (any write back to pending: see
    migration 0008). ``spans``: each run's OpenTelemetry span (a traceparent), kept in its
    errors entry. The answer: what happened to each recorded job, and the ids whose
    write was rejected for a stale lease."""
    cur = conn.cursor()
    cur.execute(
        JOB_FAIL_IF_LEASED,
        {
            **_locked_params(jobs, lock_base),
            "errors": list(errors),
            "delays": list(delays),
            "elapsed": list(elapsed),
            "max_retries": list(max_retries) if max_retries is not None else [None] * len(jobs),
            "spans": list(spans) if spans is not None else [None] * len(jobs),
        },
    )

    def read() -> tuple[list[RecordedFailure], set[int]]:
        recorded, rejected = [], set()
        for job_id, status, attempt, run_at, _ in cur.fetchall():
            if status is None:
                rejected.add(job_id)
            else:
                recorded.append(RecordedFailure(job_id, status, attempt, run_at))
        return recorded, rejected

    return Deferred(read)


def release(conn: Connection, jobs: Sequence[Leased], *, lock_base: int) -> Deferred[set[int]]:
    """claimed|running -> pending with no attempt counted; the answer is the ids whose
    write was rejected for a stale lease."""
    cur = conn.cursor()
    cur.execute(JOB_RELEASE_IF_LEASED, _locked_params(jobs, lock_base))
    return Deferred(lambda: {row[0] for row in cur.fetchall() if not row[1]})


def snooze(conn: Connection, jobs: Sequence[Leased], delays: Sequence[float], *, lock_base: int) -> Deferred[set[int]]:
    """claimed|running -> pending after ``delays`` seconds, a snooze counted and no
    attempt; the answer is the ids whose write was rejected for a stale lease."""
    cur = conn.cursor()
    cur.execute(JOB_SNOOZE_IF_LEASED, {**_locked_params(jobs, lock_base), "delays": list(delays)})
    return Deferred(lambda: {row[0] for row in cur.fetchall() if not row[1]})


def cancel(conn: Connection, jobs: Sequence[Leased], *, actor: str, lock_base: int) -> Deferred[set[int]]:
    """claimed|running -> cancelled (a handler that ended cancelled); the answer is the
    ids whose write found the job already changed (an operator's cancel, usually)."""
    cur = conn.cursor()
    cur.execute(JOB_CANCEL_IF_LEASED, {**_locked_params(jobs, lock_base), "actor": actor})
    return Deferred(lambda: {row[0] for row in cur.fetchall() if not row[1]})


def set_progress(conn: Connection, job: Leased, progress_json: str) -> bool:
    """Write a running job's progress; False if it is no longer held under its lease."""
    params = {"id": job.job_id, "lease": job.lease, "progress": progress_json}
    return conn.execute(JOB_SET_PROGRESS_IF_LEASED, params).fetchone() is not None


@dataclass(frozen=True)
class Relocked:
    """What a re-lock found: the jobs whose lock it could not take (``lost``) and, among
    them, those no longer in flight under their lease (``taken_back``: a reaper gave them
    back to pending, or an operator changed them; not this worker's to run any more)."""

    lost: set[int]
    taken_back: set[int]


def relock(conn: Connection, jobs: Sequence[Leased], *, lock_base: int) -> Relocked:
    """After a reconnect: take again the advisory locks of jobs still held under their
    leases."""
    rows = conn.execute(JOB_RELOCK_IF_LEASED, {**_leases(jobs), "lock_base": lock_base}).fetchall()
    return Relocked(
        lost={job_id for job_id, _, locked in rows if not locked},
        taken_back={job_id for job_id, leased, _ in rows if not leased},
    )


def note_finished_if_cancelled(
    conn: Connection, worker_id: str, job_ids: Sequence[int], results: Sequence[str], ago: Sequence[float]
) -> set[int]:
    """Successes of ``worker_id`` refused because an operator's cancel committed first:
    each cancelled row keeps its result (JSON text) and when its handler finished
    (``ago`` seconds before now). Returns the ids noted (the others are not cancelled)."""
    params = {"ids": list(job_ids), "results": list(results), "ago": list(ago), "worker_id": worker_id}
    return {row[0] for row in conn.execute(JOB_NOTE_FINISHED_IF_CANCELLED, params)}


def finished_under_lease(conn: Connection, jobs: Sequence[Leased]) -> set[int]:
    """Of ``jobs``, those whose row still carries the lease presented but is no longer in
    flight: after a reconnect, the outcome writes the broken connection had in fact
    committed (not stale ones)."""
    return {row[0] for row in conn.execute(JOB_GET_FINISHED_UNDER_LEASE, _leases(jobs))}


def release_orphans(conn: Connection, worker_id: str, held: Sequence[int]) -> list[int]:
    """After a reconnect: give back the claimed jobs of ``worker_id`` other than ``held``
    (claims whose answer was lost with the old connection). Returns their ids."""
    rows = conn.execute(JOB_RELEASE_ORPHANS_OF_WORKER, {"worker_id": worker_id, "held": list(held)})
    return [row[0] for row in rows]


def next_run_in(conn: Connection, queues: Sequence[str]) -> Deferred[float | None]:
    """Seconds until the earliest pending job of ``queues`` is due (<= 0: due now);
    None when none is pending."""
    cur = conn.cursor()
    cur.execute(JOB_NEXT_RUN_AT, {"queues": list(queues)})

    def read() -> float | None:
        row = cur.fetchone()
        return None if row is None or row[0] is None else float(row[0])

    return Deferred(read)


def count_events(conn: Connection, name: str, jobs: Iterable[tuple[str, str]]) -> None:
    """Count one event (a reclaim, a timeout, a stale-lease rejection) per job, given
    as (queue, type): one counter update per queue and type."""
    for (queue, job_type), n in Counter(jobs).items():
        conn.execute(COUNTER_ADD, {"queue": queue, "type": job_type, "name": name, "n": n})


def _leases(jobs: Sequence[Leased]) -> dict[str, Any]:
    return {"ids": [leased.job_id for leased in jobs], "leases": [leased.lease for leased in jobs]}


def _locked_params(jobs: Sequence[Leased], lock_base: int) -> dict[str, Any]:
    return {**_leases(jobs), "locked": [leased.locked for leased in jobs], "lock_base": lock_base}
