"""The jobq error hierarchy.

Library functions raise these and nothing else for the failures a caller can act
on. The web layer turns each class into one HTTP status with a JSON body; the CLI
turns each into a one-line message and a non-zero exit.
"""

from __future__ import annotations

from typing import Any


class JobqError(Exception):
    """Base class of every error jobq raises on purpose."""


class InvalidArgument(JobqError, ValueError):
    """An argument is out of its documented domain. ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UnhandledType(InvalidArgument):
    """No live worker has a handler for the job's type, and JOBQ_UNKNOWN_TYPES=reject
    (a typo'd type is refused at once instead of dead-lettered after its retries)."""

    def __init__(self, job_type: str, known: list[str]) -> None:
        super().__init__("type", f"no live worker has a handler for {job_type!r}; known types: {', '.join(known)}")
        self.job_type = job_type
        self.known = known


class ConfigError(JobqError):
    """A configuration variable has a bad value. ``variable`` names it."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable
        self.message = message


class NotFound(JobqError, LookupError):
    """The job or dead-letter row does not exist."""


class JobNotFound(NotFound):
    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class DeadLetterNotFound(NotFound):
    def __init__(self, dead_letter_id: int) -> None:
        super().__init__(f"dead-letter entry {dead_letter_id} not found")
        self.dead_letter_id = dead_letter_id


class OperationNotFound(NotFound):
    def __init__(self, operation_id: int) -> None:
        super().__init__(f"operation {operation_id} not found")
        self.operation_id = operation_id


class DeadLetterGroupNotFound(NotFound):
    def __init__(self, group_id: str) -> None:
        super().__init__(f"dead-letter group {group_id} not found")
        self.group_id = group_id


class WorkflowNotFound(NotFound):
    def __init__(self, workflow_id: int) -> None:
        super().__init__(f"workflow {workflow_id} not found")
        self.workflow_id = workflow_id


class JobFailed(JobqError):
    """A job waited for (:func:`jobq.result`) ended ``dead`` or ``cancelled``: ``job`` is
    its last snapshot, ``status`` its status, ``error`` its last error."""

    def __init__(self, job: Any) -> None:
        lines = (job.error or "").strip().splitlines()
        super().__init__(f"job {job.id} ended {job.status}" + (f": {lines[-1]}" if lines else ""))
        self.job = job
        self.status = job.status
        self.error = job.error


class Conflict(JobqError):
    """The row exists but its state forbids the operation."""


class JobNotDeletable(Conflict):
    def __init__(self, job_id: int, status: str) -> None:
        super().__init__(f"job {job_id} is {status}; only pending jobs can be deleted")
        self.job_id = job_id
        self.status = status


class JobNotCancellable(Conflict):
    def __init__(self, job_id: int, status: str) -> None:
        super().__init__(f"job {job_id} is {status}; only pending, claimed or running jobs can be cancelled")
        self.job_id = job_id
        self.status = status


class JobNotRetryable(Conflict):
    def __init__(self, job_id: int, status: str) -> None:
        super().__init__(f"job {job_id} is {status}; only dead or cancelled jobs can be retried")
        self.job_id = job_id
        self.status = status


class StepNotRetryable(Conflict):
    """A workflow's step is retried with its workflow, whose edges must follow it."""

    def __init__(self, job_id: int, workflow_id: int) -> None:
        super().__init__(
            f"job {job_id} is a step of workflow {workflow_id}: retry the workflow "
            f"(jobq.retry_workflow({workflow_id}), POST /workflows/{workflow_id}/retry)"
        )
        self.job_id = job_id
        self.workflow_id = workflow_id


class AlreadyRetried(Conflict):
    def __init__(self, job_id: int, retried_as: int | None) -> None:
        super().__init__(f"job {job_id} was already retried as job {retried_as}")
        self.job_id = job_id
        self.retried_as = retried_as


class JobNotScheduled(Conflict):
    def __init__(self, job_id: int, status: str) -> None:
        what = "already due" if status == "pending" else status
        super().__init__(f"job {job_id} is {what}; only pending jobs scheduled in the future can be run now")
        self.job_id = job_id
        self.status = status


class JobBusy(Conflict):
    """Another transaction holds the job's row (a claim or an action in flight)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} is being changed by another session; try again")
        self.job_id = job_id


class Snooze(JobqError):
    """Raised by a handler: put the job back to pending, due ``seconds`` from now,
    without counting an attempt (the job counts its snoozes; past JOBQ_MAX_SNOOZES a
    snooze is a failed run). Raises :class:`InvalidArgument` for seconds that are not
    a number from 0 to a year."""

    MAX_SECONDS = 366 * 24 * 3600.0

    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= self.MAX_SECONDS:
            raise InvalidArgument("seconds", "must be a number of seconds from 0 to a year")
        super().__init__(f"snoozed for {seconds:g} s")
        self.seconds = float(seconds)


class Cancelled(BaseException):
    """Raised inside a handler whose job was cancelled while it ran. A BaseException, so
    that a handler's ``except Exception`` does not swallow it; a handler that catches it
    to clean up should re-raise it (or return: the job ends cancelled either way)."""


class AlreadyReplayed(Conflict):
    def __init__(self, dead_letter_id: int, replayed_as: int | None) -> None:
        super().__init__(f"dead-letter entry {dead_letter_id} was already replayed as job {replayed_as}")
        self.dead_letter_id = dead_letter_id
        self.replayed_as = replayed_as


class Overloaded(JobqError):
    """Admission control: too many pending jobs to accept more right now."""

    def __init__(self, pending: int, limit: int) -> None:
        super().__init__(f"{pending} jobs are pending, above the limit of {limit}; retry later")
        self.pending = pending
        self.limit = limit


class UnknownJobType(JobqError, LookupError):
    """No handler is registered for a job's type."""

    def __init__(self, job_type: str) -> None:
        super().__init__(f"no handler registered for job type {job_type!r}")
        self.job_type = job_type


class BadPayload(JobqError, ValueError):
    """Raised by a handler whose job's payload cannot be processed: the run fails with
    this message (no traceback), and is retried by policy like any failure."""


class DatabaseUnavailable(JobqError):
    """PostgreSQL could not be reached or dropped the connection."""


class OutcomeUnknown(DatabaseUnavailable):
    """The connection was lost while jobs were being inserted under ``ids``: they may or
    may not be stored. :func:`jobq.jobs.submit.submit_reserved` with the same jobs and ids
    settles it."""

    def __init__(self, ids: list[int], reason: str) -> None:
        shown = f"job {ids[0]}" if len(ids) == 1 else f"jobs {ids[0]}..{ids[-1]}"
        super().__init__(f"database unavailable: {shown} may or may not be stored ({reason})")
        self.ids = ids
        self.reason = reason


class SchemaError(JobqError):
    """The database schema does not match what this code needs."""


class SchemaTooOld(SchemaError):
    def __init__(self, applied: int, required: int) -> None:
        super().__init__(
            f"database schema is at version {applied}, this jobq needs {required}: run `jobq migrate`"
        )
        self.applied = applied
        self.required = required


class ConversionNeeded(SchemaTooOld):
    """The next migration rewrites the jobs table, which holds jobs: only an explicit
    ``jobq migrate --partition`` applies it."""

    def __init__(self, version: int, option: str) -> None:
        SchemaError.__init__(
            self,
            f"database schema is at version {version - 1}, this jobq needs {version}, which converts the jobs "
            f"table to the partitioned layout: stop the workers and run `jobq migrate {option}` "
            "(README: Upgrading to the partitioned layout)",
        )
        self.applied = version - 1
        self.required = version


class MigrationBlocked(SchemaError):
    """A migration could not take the locks its DDL needs: other transactions held them
    for as long as ``migrate`` gives way and tries again."""

    def __init__(self, version: int, name: str, seconds: float) -> None:
        super().__init__(
            f"migration {version:04d}_{name} could not take its locks in {seconds:g} s: other transactions hold "
            "the tables it changes (pg_stat_activity shows them); run `jobq migrate` again once they end"
        )
        self.version = version
        self.name = name


class SchemaTooNew(SchemaError):
    def __init__(self, applied: int, known: int) -> None:
        super().__init__(
            f"database schema is at version {applied}, newer than this jobq knows ({known}): "
            "deploy the newer code before migrating"
        )
        self.applied = applied
        self.known = known
