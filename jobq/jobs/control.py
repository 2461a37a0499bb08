"""Acting on single jobs: ``cancel`` (pending, claimed or running), ``delete`` (pending
only), ``retry`` (dead or cancelled: a new pending job) and ``run_now`` (pending and
scheduled later: due now). Each action is recorded in the audit trail
(:mod:`jobq.jobs.audit`) in the same transaction. The ``*_ids`` functions are the same
changes for many jobs at once, without an audit row: bulk operations
(:mod:`jobq.jobs.operations`) call them chunk by chunk.

Cancelling a running job is two steps: this module marks the row cancelled (with a
new lease, so whatever the run still writes is a stale write) and announces it on the
``jobq_control`` channel; the maintenance process of the worker's host hears it and
has the run stopped (:mod:`jobq.daemon.supervisor`): :class:`jobq.Cancelled` is
raised in the handler, and its worker is killed if the handler has not returned
JOBQ_CANCEL_GRACE seconds later. A notification is lost when the listener is away (a
database restart): once it listens again it asks :func:`cancelled_recently`; and the
worker's heartbeat, which finds the job's lease changed, stops the handler as well.
"""

from __future__ import annotations

from jobq.store.sql.control import (
    JOB_CANCEL_IF_UNFINISHED,
    JOB_LIST_CANCELLED_RECENTLY_ON_HOST,
    JOB_DELETE_IF_PENDING,
    JOB_GET_RETRY_STATE,
    JOB_GET_STATUS,
    JOB_RETRY_IF_FINISHED_UNSUCCESSFULLY,
    JOB_RUN_NOW_IF_SCHEDULED,
)
from jobq.jobs import audit
from jobq.store.connections import Connection, again_if_moved, connection
from jobq.errors import AlreadyRetried, JobBusy, JobNotCancellable, JobNotDeletable, JobNotFound
from jobq.errors import JobNotRetryable, JobNotScheduled, StepNotRetryable
from jobq.job import Job
from jobq.jobs.ledger import check_id, get


def cancel(job_id: int, *, actor: str | None = None, conn: Connection | None = None) -> Job:
    """Cancel a job that has not finished; returns it, cancelled. A running job's
    handler is asked to stop within about a second. Raises :class:`JobNotFound`, or
    :class:`JobNotCancellable` (a :class:`~jobq.errors.Conflict`) with the status of a
    job already done, dead or cancelled. Commits on its own connection; on ``conn``,
    the caller commits."""
    check_id(job_id)
    actor = actor or audit.library_actor()
    with connection(conn) as c:
        changed = cancel_ids(c, [job_id], actor)
        if not changed:
            _refuse(c, job_id, JobNotCancellable)
        audit.record(c, actor, "cancel", {"id": job_id}, {"changed": 1, "was": changed[job_id]})
        return get(job_id, conn=c)


def cancel_ids(conn: Connection, ids: list[int], actor: str) -> dict[int, str]:
    """Cancel those of ``ids`` that have not finished, in the caller's transaction;
    returns each cancelled id with its status before. No audit row: the caller writes
    one for the whole action."""
    rows = again_if_moved(conn, JOB_CANCEL_IF_UNFINISHED, {"ids": ids, "actor": actor}).fetchall()
    return {job_id: was for job_id, was, _ in rows}


def cancelled_recently(conn: Connection, seconds: float, host: str) -> list[int]:
    """The ids of the jobs cancelled in the last ``seconds`` whose last worker ran on
    ``host``: what a host's control listener may have missed while it was away (a
    NOTIFY sent while it was disconnected is lost), to be passed on after it listens
    again. Passing on a cancel for a job no longer in flight does nothing."""
    return [row[0] for row in conn.execute(JOB_LIST_CANCELLED_RECENTLY_ON_HOST, {"seconds": seconds, "host": host})]


def delete(job_id: int, *, actor: str | None = None, conn: Connection | None = None) -> None:
    """Delete a pending job. Raises :class:`JobNotFound`, or :class:`JobNotDeletable`
    when the job is claimed, running or finished (cancel it instead)."""
    check_id(job_id)
    with connection(conn) as c:
        if again_if_moved(c, JOB_DELETE_IF_PENDING, {"id": job_id}).fetchone() is None:
            _refuse(c, job_id, JobNotDeletable)
        audit.record(c, actor or audit.library_actor(), "delete", {"id": job_id}, {"changed": 1})


def _refuse(
    conn: Connection, job_id: int, conflict: type[JobNotCancellable] | type[JobNotDeletable] | type[JobNotScheduled]
) -> None:
    row = conn.execute(JOB_GET_STATUS, {"id": job_id}).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    raise conflict(job_id, row[0])


def retry(job_id: int, *, actor: str | None = None, conn: Connection | None = None) -> Job:
    """A new pending job from a dead or cancelled one, which records it (``retried_as``);
    returns the new job. A dead job's new job is the replay of its dead letter (as
    :func:`jobq.replay`: the letter records it too); a cancelled job's is a copy (type,
    queue, payload, priority, retries, tags). Once only: raises :class:`AlreadyRetried`
    naming the job it was retried as (also when its letter was replayed), and
    :class:`JobNotFound`, :class:`JobNotRetryable` (any other status),
    :class:`StepNotRetryable` (a workflow's step: see :func:`jobq.retry_workflow`) or
    :class:`JobBusy`. Commits on its own connection; on ``conn``, the caller commits."""
    check_id(job_id)
    actor = actor or audit.library_actor()
    with connection(conn) as c, c.transaction():
        new_ids = retry_ids(c, [job_id])
        if not new_ids:
            _refuse_retry(c, job_id)
        audit.record(c, actor, "retry", {"id": job_id}, {"changed": 1, "retried_as": new_ids[job_id]})
        return get(new_ids[job_id], conn=c)


def retry_ids(conn: Connection, ids: list[int]) -> dict[int, int]:
    """Retry those of ``ids`` that are dead or cancelled and not retried yet (skipping
    rows another session holds), in the caller's transaction; returns each retried id
    with its new job's id."""
    return dict(again_if_moved(conn, JOB_RETRY_IF_FINISHED_UNSUCCESSFULLY, {"ids": ids}).fetchall())


def run_now(job_id: int, *, actor: str | None = None, conn: Connection | None = None) -> Job:
    """Make a pending job scheduled in the future due now (idle workers of its queue are
    woken); returns it. Raises :class:`JobNotFound`, or :class:`JobNotScheduled` for a
    job already due or not pending."""
    check_id(job_id)
    actor = actor or audit.library_actor()
    with connection(conn) as c, c.transaction():
        if not run_now_ids(c, [job_id]):
            _refuse(c, job_id, JobNotScheduled)
        audit.record(c, actor, "run_now", {"id": job_id}, {"changed": 1})
        return get(job_id, conn=c)


def run_now_ids(conn: Connection, ids: list[int]) -> list[int]:
    """Make those of ``ids`` that are pending and scheduled later due now (skipping rows
    another session holds), in the caller's transaction; returns the ids changed."""
    return [row[0] for row in again_if_moved(conn, JOB_RUN_NOW_IF_SCHEDULED, {"ids": ids})]


def _refuse_retry(conn: Connection, job_id: int) -> None:
    row = conn.execute(JOB_GET_RETRY_STATE, {"id": job_id}).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    status, retried_as, letter_replayed, replayed_as, workflow_id = row
    if workflow_id is not None and status in ("dead", "cancelled"):
        raise StepNotRetryable(job_id, workflow_id)
    if retried_as is not None:
        raise AlreadyRetried(job_id, retried_as)
    if letter_replayed:
        raise AlreadyRetried(job_id, replayed_as)
    if status not in ("dead", "cancelled"):
        raise JobNotRetryable(job_id, status)
    raise JobBusy(job_id)
