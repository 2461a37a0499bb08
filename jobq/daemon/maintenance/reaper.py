"""Taking jobs back from workers that are gone.

Two ways to know a worker is gone, one rule for both: a job is recovered only by a
session that took its advisory lock, which it can do only once the worker's own
session has ended. A worker whose session is still connected (stopped, slow, in a
long GC pause) never has its job handed to someone else.

- :func:`recover_worker`: the supervisor saw the process die (a crash, a timeout kill,
  a shutdown kill) and knows which job it was running: that job gets its fenced
  outcome at once, with the reason; the jobs it had finished without writing them
  (from its finished area) are recorded done; its other claimed jobs go back to
  pending.
- :func:`reap_stale`: jobs whose heartbeat stopped (a host lost with its
  supervisor): a claimed job goes back to pending with no attempt counted; a
  running one counts a failed attempt, ``worker lost``, so that a job that kills
  every worker that runs it ends in the dead-letter table instead of looping.
  The jobs of workers the reaping supervisor knows alive are spared: a worker cut
  off from the database keeps them, and re-locks them when it is back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import psycopg

from jobq.store.sql.leases import (
    JOB_COUNT_INFLIGHT_OF_WORKER,
    JOB_LOCK_INFLIGHT_OF_WORKER,
    JOB_LOCK_STALE,
    JOB_UNLOCK,
)
from jobq.jobs import leases
from jobq.limits import claims as limited
from jobq.store import connections
from jobq.daemon.boards.finished import Finished
from jobq.daemon.messages import Gone
from jobq.store.connections import Connection
from jobq.settings import Settings

log = logging.getLogger(__name__)

WORKER_LOST = "worker lost"
RECLAIMED_COUNTER = "reclaimed_total"
TIMEOUT_COUNTER = "timeouts_total"
REAP_BATCH = 500


@dataclass(frozen=True)
class LostJob:
    """An in-flight job of a worker that is gone, whose advisory lock this session took
    (so its outcome write releases it: a :class:`jobq.jobs.leases.Leased`)."""

    job_id: int
    lease: int
    status: str
    attempt: int
    queue: str
    type: str
    locked: bool = True


@dataclass
class Recovered:
    """What one pass of recovery did."""

    completed: int = 0  # done: its handler had returned, the worker died before writing it
    snoozed: int = 0  # pending again after its snooze: the same
    released: int = 0  # back to pending, no attempt counted
    retried: int = 0  # a failed attempt, back to pending after backoff
    dead: int = 0  # a failed attempt, out of retries
    superseded: int = 0  # back to pending, but another job held its key meanwhile: cancelled
    busy: int = 0  # still locked by a live session: not touched
    rejected: set[int] = field(default_factory=set)  # changed by someone else since we locked them

    @property
    def changed(self) -> int:
        return self.completed + self.snoozed + self.released + self.retried + self.dead + self.superseded


def reap_stale(conn: Connection, settings: Settings, lock_base: int, *, spared: Collection[str] = ()) -> Recovered:
    """One pass of the stale reaper over jobs whose heartbeat is older than
    ``JOBQ_STALE_THRESHOLD`` and whose worker session is gone, but for the workers
    ``spared`` (alive: this supervisor's own)."""
    params = {"stale_seconds": settings.stale_threshold, "limit": REAP_BATCH, "spared": list(spared)}
    rows = _locked(conn, JOB_LOCK_STALE, params, lock_base)
    def write() -> Recovered:
        recovered = _recover(conn, rows, {}, settings, lock_base)
        _count(conn, rows, RECLAIMED_COUNTER, recovered)
        return recovered

    recovered = _in_one_transaction(conn, rows, write, lock_base)  # the outcomes and their count commit together
    if recovered.changed:
        log.warning(
            "reaper.reclaimed released=%s retried=%s dead=%s superseded=%s jobs=%s",
            recovered.released, recovered.retried, recovered.dead, recovered.superseded,
            ",".join(str(r.job_id) for r in rows),
        )
    return recovered


def recover_worker(conn: Connection, settings: Settings, lock_base: int, gone: Gone) -> Recovered:
    """Recover the in-flight jobs of a worker process that is gone.

    ``gone.job_id``/``gone.lease`` name the job it was running (0 when none),
    ``gone.kind`` why it is gone: ``timeout`` (killed at its job's deadline), ``crash``
    (died on its own or was killed by someone else), ``cancel`` (killed after its
    cancelled job's grace: that job is already cancelled, its others go back to pending)
    or ``shutdown`` (killed after the graceful timeout: back to pending, no attempt
    counted). ``gone.finished`` are jobs whose handler had returned, raised or snoozed:
    done, failed or snoozed as noted, under the lease they ran with. Jobs whose lock is
    still held (the session has not ended yet) are counted as busy; call again.
    """
    rows = _locked(conn, JOB_LOCK_INFLIGHT_OF_WORKER, {"worker_id": gone.worker_id}, lock_base)
    finished = {(f.job_id, f.lease): f for f in gone.finished}
    done = [row for row in rows if (row.job_id, row.lease) in finished]
    rows = [row for row in rows if (row.job_id, row.lease) not in finished]
    current = [row for row in rows if row.job_id == gone.job_id and row.lease == gone.lease]
    reasons = {row.job_id: _reason(gone) for row in current}
    def write() -> Recovered:
        recovered = _recover(conn, rows, reasons, settings, lock_base)
        noted: dict[str, list[LostJob]] = {"done": [], "failed": [], "snoozed": []}
        for row in done:
            noted[finished[row.job_id, row.lease].outcome].append(row)
        succeeded, failed, snoozed = noted["done"], noted["failed"], noted["snoozed"]
        if succeeded:
            outcomes = [finished[row.job_id, row.lease] for row in succeeded]
            results = [f.result for f in outcomes]
            rejected = leases.complete(conn, succeeded, results, [f.seconds for f in outcomes], lock_base=lock_base).result()  # type: ignore[arg-type]
            recovered.completed = len(succeeded) - len(rejected)
            recovered.rejected |= rejected
        if failed:
            _fail_noted(conn, failed, [finished[row.job_id, row.lease] for row in failed], recovered, lock_base)
        if snoozed:
            delays = [finished[row.job_id, row.lease].snooze for row in snoozed]
            rejected = leases.snooze(conn, snoozed, delays, lock_base=lock_base).result()  # type: ignore[arg-type]
            recovered.snoozed = len(snoozed) - len(rejected)
            recovered.rejected |= rejected
        if gone.kind == "timeout":
            _count(conn, [row for row in rows if row.job_id == gone.job_id], TIMEOUT_COUNTER, recovered)
        elif gone.kind == "crash":
            _count(conn, rows, RECLAIMED_COUNTER, recovered)
        return recovered

    recovered = _in_one_transaction(conn, rows + done, write, lock_base)  # no reader sees an outcome without its count
    in_flight = conn.execute(JOB_COUNT_INFLIGHT_OF_WORKER, {"worker_id": gone.worker_id}).fetchone()[0]  # type: ignore[index]
    recovered.busy = int(in_flight)
    if recovered.changed:
        log.warning(
            "reaper.recovered_worker worker=%s kind=%s job=%s completed=%s snoozed=%s released=%s retried=%s dead=%s",
            gone.worker_id, gone.kind, gone.job_id or "-", recovered.completed, recovered.snoozed, recovered.released,
            recovered.retried, recovered.dead,
        )
    return recovered


def _in_one_transaction(
    conn: Connection, rows: list[LostJob], write: Callable[[], Recovered], lock_base: int
) -> Recovered:
    """``write()`` of the locked ``rows`` in one transaction, sent again after a change
    made meanwhile (leases.changed_meanwhile: the rolled-back attempt let go of no lock
    of the job it failed on). If it fails for good, the rows' locks are let go (session locks outlive the
    rollback; kept, they would keep the jobs from everyone, and a retry would take
    them a second time) and the error raised."""
    for attempt in range(leases.WRITE_AGAIN_RETRIES + 1):
        try:
            with conn.transaction():
                limited.release_slots(conn, rows)  # their runs are over: their slots go with their outcomes
                return write()
        except psycopg.Error as exc:
            if leases.changed_meanwhile(exc) and attempt < leases.WRITE_AGAIN_RETRIES:
                log.info("reaper.changed_meanwhile error=%s: written again", connections.first_line(exc))
                continue
            _unlock(conn, rows, lock_base)
            raise
    raise AssertionError("unreachable")


def _unlock(conn: Connection, rows: list[LostJob], lock_base: int) -> None:
    if rows and not conn.broken:
        conn.execute(JOB_UNLOCK, {"ids": [r.job_id for r in rows], "lock_base": lock_base})


def _reason(gone: Gone) -> str | None:
    """The error recorded for the job a gone worker was running (None: released)."""
    if gone.kind == "timeout":
        return f"timeout after {gone.timeout:g} s"
    if gone.kind == "crash":
        return f"worker process died while running this job ({gone.detail})"
    return None  # shutdown: back to pending as if never started


def _locked(conn: Connection, statement: str, params: dict, lock_base: int) -> list[LostJob]:
    return [LostJob(*row) for row in conn.execute(statement, {**params, "lock_base": lock_base}).fetchall()]


def _recover(
    conn: Connection, rows: list[LostJob], reasons: dict[int, str | None], settings: Settings, lock_base: int
) -> Recovered:
    """Release or fail locked rows (and so unlock them). A row named in ``reasons``
    gets that error (None: released); others: claimed -> released, running -> failed
    as ``worker lost``."""
    release, fail, errors = [], [], []
    for row in rows:
        reason = reasons[row.job_id] if row.job_id in reasons else (None if row.status == "claimed" else WORKER_LOST)
        if reason is None:
            release.append(row)
        else:
            fail.append(row)
            errors.append(reason)
    recovered = Recovered()
    if release:
        recovered.rejected = leases.release(conn, release, lock_base=lock_base).result()
        recovered.released = len(release) - len(recovered.rejected)
    if fail:
        delays = [settings.retry_delay(r.attempt) for r in fail]
        _add_failures(recovered, *leases.fail(conn, fail, errors, delays, [0.0] * len(fail), lock_base=lock_base).result())
    return recovered


def _add_failures(recovered: Recovered, failures: list[leases.RecordedFailure], rejected: set[int]) -> None:
    recovered.retried += sum(1 for f in failures if f.status == "pending")
    recovered.dead += sum(1 for f in failures if f.status == "dead")
    recovered.superseded += sum(1 for f in failures if f.status == "cancelled")
    recovered.rejected |= rejected


def _fail_noted(
    conn: Connection, rows: list[LostJob], noted: list[Finished], recovered: Recovered, lock_base: int
) -> None:
    """Record the failures a gone worker had noted and perhaps not written, as it would
    have: its error, delay, limit of retries and span."""
    failures = [f.failure for f in noted]
    _add_failures(recovered, *leases.fail(
        conn, rows, [f.error for f in failures], [f.delay for f in failures], [f.seconds for f in noted],  # type: ignore[union-attr]
        max_retries=[f.max_retries for f in failures], spans=[f.span for f in failures],  # type: ignore[union-attr]
        lock_base=lock_base,
    ).result())


def _count(conn: Connection, rows: list[LostJob], counter: str, recovered: Recovered) -> None:
    """Count the event for the rows whose write went through (not a row that changed
    under us between the lock and the write)."""
    leases.count_events(conn, counter, [(r.queue, r.type) for r in rows if r.job_id not in recovered.rejected])
