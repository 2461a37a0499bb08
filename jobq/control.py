"""Acting on single jobs: ``cancel`` (pending, claimed or running) and ``delete``
(pending only). Each action is recorded in the audit trail (:mod:`jobq.audit`) in the
same transaction.

Cancelling a running job is two steps: this module marks the row cancelled (with a
new lease, so whatever the run still writes is a stale write) and announces it on the
``jobq_control`` channel; the maintenance process of the worker's host hears it and
has the run stopped (:mod:`jobq.daemon.supervisor`): :class:`jobq.Cancelled` is
raised in the handler, and its worker is killed if the handler has not returned
JOBQ_CANCEL_GRACE seconds later.
"""

from __future__ import annotations

from jobq import audit, queries
from jobq.db import Connection, connection
from jobq.errors import JobNotCancellable, JobNotDeletable, JobNotFound
from jobq.job import Job
from jobq.ledger import check_id, get


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
    rows = conn.execute(queries.JOB_CANCEL_IF_UNFINISHED, {"ids": ids, "actor": actor}).fetchall()
    return {job_id: was for job_id, was, _ in rows}


def delete(job_id: int, *, actor: str | None = None, conn: Connection | None = None) -> None:
    """Delete a pending job. Raises :class:`JobNotFound`, or :class:`JobNotDeletable`
    when the job is claimed, running or finished (cancel it instead)."""
    check_id(job_id)
    with connection(conn) as c:
        if c.execute(queries.JOB_DELETE_IF_PENDING, {"id": job_id}).fetchone() is None:
            _refuse(c, job_id, JobNotDeletable)
        audit.record(c, actor or audit.library_actor(), "delete", {"id": job_id}, {"changed": 1})


def _refuse(conn: Connection, job_id: int, conflict: type[JobNotCancellable] | type[JobNotDeletable]) -> None:
    row = conn.execute(queries.JOB_GET_STATUS, {"id": job_id}).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    raise conflict(job_id, row[0])
