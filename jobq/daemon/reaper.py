"""Taking jobs back from workers that are gone.

Two ways to know a worker is gone, one rule for both: a job is settled only by a
session that took its advisory lock, which it can do only once the worker's own
session has ended. A worker whose session is still connected (stopped, slow, in a
long GC pause) never has its job handed to someone else.

- :func:`settle_worker`: the supervisor saw the process die (a crash, a timeout kill,
  a shutdown kill) and knows which job it was running: that job gets its fenced
  outcome at once, with the reason; its other claimed jobs go back to pending.
- :func:`reap_stale`: jobs whose heartbeat stopped (a host lost with its
  supervisor): a claimed job goes back to pending with no attempt counted; a
  running one counts a failed attempt, ``worker lost``, so that a job that kills
  every worker that runs it ends in the dead-letter table instead of looping.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobq import claims, queries
from jobq.claims import Held
from jobq.db import Connection
from jobq.settings import Settings

log = logging.getLogger(__name__)

WORKER_LOST = "worker lost"
RECLAIMED_COUNTER = "reclaimed_total"
TIMEOUT_COUNTER = "timeouts_total"
REAP_BATCH = 500


@dataclass(frozen=True)
class Locked:
    """An in-flight job whose lock this session took."""

    job_id: int
    lease: int
    status: str
    attempt: int
    queue: str
    type: str


@dataclass
class Settled:
    """What one settlement did."""

    released: int = 0  # back to pending, no attempt counted
    retried: int = 0  # a failed attempt, back to pending after backoff
    dead: int = 0  # a failed attempt, out of retries
    busy: int = 0  # still locked by a live session: not touched

    @property
    def changed(self) -> int:
        return self.released + self.retried + self.dead


def reap_stale(conn: Connection, settings: Settings, lock_base: int) -> Settled:
    """One pass of the stale reaper over jobs whose heartbeat is older than
    ``JOBQ_STALE_THRESHOLD`` and whose worker session is gone."""
    rows = _locked(conn, queries.JOB_LOCK_STALE, {"stale_seconds": settings.stale_threshold, "limit": REAP_BATCH}, lock_base)
    settled = _settle(conn, rows, {}, settings, lock_base)
    _count(conn, rows, RECLAIMED_COUNTER)
    if settled.changed:
        log.warning(
            "reaper.reclaimed released=%s retried=%s dead=%s jobs=%s",
            settled.released, settled.retried, settled.dead, ",".join(str(r.job_id) for r in rows),
        )
    return settled


def settle_worker(
    conn: Connection,
    settings: Settings,
    lock_base: int,
    *,
    worker_id: str,
    job_id: int,
    lease: int,
    kind: str,
    timeout: float,
    detail: str,
) -> Settled:
    """Settle the in-flight jobs of a worker process that is gone.

    ``job_id``/``lease`` name the job it was running (0 when none), ``kind`` why it is
    gone: ``timeout`` (killed at its job's deadline), ``crash`` (died on its own or was
    killed by someone else) or ``shutdown`` (killed after the graceful timeout: back to
    pending, no attempt counted). Jobs whose lock is still held (the session has not
    ended yet) are counted as busy; call again.
    """
    rows = _locked(conn, queries.JOB_LOCK_INFLIGHT_OF_WORKER, {"worker_id": worker_id}, lock_base)
    reasons: dict[int, str | None] = {}
    for row in rows:
        if row.job_id == job_id and row.lease == lease:
            if kind == "timeout":
                reasons[row.job_id] = f"timeout after {timeout:g} s"
            elif kind == "crash":
                reasons[row.job_id] = f"worker process died while running this job ({detail})"
            else:
                reasons[row.job_id] = None  # shutdown: back to pending as if never started
    settled = _settle(conn, rows, reasons, settings, lock_base)
    if kind == "timeout":
        _count(conn, [r for r in rows if r.job_id == job_id], TIMEOUT_COUNTER)
    elif kind == "crash":
        _count(conn, rows, RECLAIMED_COUNTER)
    in_flight = conn.execute(queries.JOB_COUNT_INFLIGHT_OF_WORKER, {"worker_id": worker_id}).fetchone()[0]  # type: ignore[index]
    settled.busy = int(in_flight)
    if settled.changed:
        log.warning(
            "reaper.settled_worker worker=%s kind=%s job=%s released=%s retried=%s dead=%s",
            worker_id, kind, job_id or "-", settled.released, settled.retried, settled.dead,
        )
    return settled


def _locked(conn: Connection, statement: str, params: dict, lock_base: int) -> list[Locked]:
    return [Locked(*row) for row in conn.execute(statement, {**params, "lock_base": lock_base}).fetchall()]


def _settle(
    conn: Connection, rows: list[Locked], reasons: dict[int, str | None], settings: Settings, lock_base: int
) -> Settled:
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
    settled = Settled(released=len(release))
    if release:
        claims.release(conn, [Held(r.job_id, r.lease) for r in release], lock_base=lock_base).result()
    if fail:
        delays = [settings.retry_delay(r.attempt) for r in fail]
        failures, _ = claims.fail(
            conn, [Held(r.job_id, r.lease) for r in fail], errors, delays, [0.0] * len(fail), lock_base=lock_base
        ).result()
        settled.retried = sum(1 for f in failures if f.status == "pending")
        settled.dead = sum(1 for f in failures if f.status == "dead")
    return settled


def _count(conn: Connection, rows: list[Locked], counter: str) -> None:
    claims.count_events(conn, counter, [(r.queue, r.type) for r in rows])
