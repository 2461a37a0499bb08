"""The rows jobq hands out: :class:`Job` and :class:`DeadLetter`.

Both are snapshots of one row, built by psycopg's ``class_row`` from queries
that select exactly their fields. ``job["payload"]`` works like ``job.payload``, for
handlers written against the seed's dict-shaped jobs.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime, timezone
from typing import Any

# "failed" is the seed's: no jobq process writes it, old clients may filter on it.
# "waiting": a workflow's step whose parents have not all finished (never claimed).
STATUSES = ("pending", "claimed", "running", "done", "failed", "dead", "cancelled", "waiting")
FINISHED = ("done", "failed", "dead", "cancelled")


class _Row:
    """Mapping-style read access and a JSON-ready dict, shared by both row types."""

    __slots__ = ()

    def __getitem__(self, name: str) -> Any:
        if name not in self.__dataclass_fields__:  # type: ignore[attr-defined]
            raise KeyError(name)
        return getattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def to_dict(self) -> dict[str, Any]:
        """Every public field; timestamps as ISO-8601 strings in UTC."""
        # A plain loop over names computed once per class: the API calls this for
        # every job of a 1,000-job batch.
        values = {}
        for name in _public_fields(type(self)):
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.astimezone(timezone.utc).isoformat()
            values[name] = value
        return values


@functools.cache
def _public_fields(row_type: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(row_type) if not field.metadata.get("private"))


@dataclasses.dataclass(slots=True)
class Job(_Row):
    """A snapshot of one row of ``jobs`` (changing it changes nothing in the database).
    ``attempt`` is the 0-based index of the current run."""

    id: int
    type: str
    queue: str
    payload: dict[str, Any]
    status: str
    priority: int
    attempt: int
    max_retries: int
    run_at: datetime
    claimed_at: datetime | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    completed_at: datetime | None
    created_at: datetime
    result: Any
    error: str | None
    errors: list[dict[str, Any]]
    worker_id: str | None
    # The fencing token of the current claim: the worker's proof, never shown by the API.
    lease: int | None = dataclasses.field(default=None, metadata={"private": True})
    idempotency_key: str | None = None
    tags: list[str] | None = None
    # The handler's last jobq.progress(): {"fraction", "message", "data", "at"}.
    progress: dict[str, Any] | None = None
    cancelled_by: str | None = None
    retried_as: int | None = None  # the job a retry of this one created
    schedule: str | None = None  # the periodic schedule that made it (jobq.periodic)
    scheduled_for: datetime | None = None  # its slot (UTC); None for a schedule's run-now
    snoozes: int = 0  # times its handler raised jobq.Snooze (no attempt counted for them)
    unique_while: str = "always"  # how long idempotency_key keeps another job out (jobq.spec)
    workflow_id: int | None = None  # the workflow this job is a step of (jobq.Workflow)
    # Copied in when the step was released: step name -> result, for its parents that
    # ended done; step name -> last error, for those that did not (on_parent_failure="run").
    parent_results: dict[str, Any] | None = None
    parent_failures: dict[str, str] | None = None
    # The W3C traceparent of the span that enqueued it (jobq.observe.tracing); not shown by the API.
    traceparent: str | None = dataclasses.field(default=None, metadata={"private": True})
    # A cancelled job whose handler had finished before the cancel committed (its result,
    # in ``result``, was still in its worker's buffer): when the handler finished.
    handler_finished_at: datetime | None = None
    concurrency_key: str | None = None  # the key its limits count it under (jobq.limits)


@dataclasses.dataclass(slots=True)
class DeadLetter(_Row):
    """A snapshot of one row of ``dead_letter_jobs``: a job that ran out of retries."""

    id: int
    original_id: int
    type: str
    queue: str
    payload: dict[str, Any]
    priority: int
    max_retries: int
    error: str | None
    attempts: int
    errors: list[dict[str, Any]]
    worker_id: str | None
    died_at: datetime
    replayed_at: datetime | None
    replayed_as: int | None
    signature: str | None = None  # the error's cause, numbers and ids normalised
    group_id: str | None = None  # of its group in jobq_dead_letter_groups: hash of type and signature


def last_line(error: str | None) -> str:
    """The line of an error that says what happened (a traceback's last)."""
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else ""
