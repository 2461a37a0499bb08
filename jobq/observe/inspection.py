"""What `jobq inspect` shows, gathered in a handful of index-backed queries, so that it
answers in well under a second on a table of millions of jobs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from jobq.store.sql.database import ADVISORY_LOCK_LIST_OF_NAMESPACE
from jobq.store.sql.dead_letters import DEAD_LETTER_COUNT_WAITING, DEAD_LETTER_LIST_WAITING
from jobq.store.sql.ledger import JOB_LIST_RECENT_FAILURES
from jobq.store.sql.queues import JOB_GET_OLDEST_DUE, QUEUE_LIST
from jobq.store.sql.workers import WORKER_LIST
from jobq.store import locks
from jobq.store.connections import Connection
from jobq.job import STATUSES, last_line
from jobq.handlers import known
from jobq.jobs.ledger import counts
from jobq.limits.rules import KeyRule, QueueLimits, list_limits, queue_limits

RECENT = 10


@dataclass(frozen=True)
class WorkerRow:
    id: str
    hostname: str
    pid: int
    queues: list[str]
    current_job_id: int | None
    jobs_done: int
    started_at: datetime
    heartbeat_age_seconds: float
    progress: dict[str, Any] | None = None  # of the job it runs (jobq.progress)


@dataclass(frozen=True)
class OldestPending:
    id: int
    type: str
    queue: str
    run_at: datetime
    age_seconds: float


@dataclass(frozen=True)
class RecentFailure:
    id: int
    type: str
    queue: str
    status: str
    attempt: int
    max_retries: int
    error: str
    at: datetime


@dataclass(frozen=True)
class DeadRow:
    id: int
    original_id: int
    type: str
    queue: str
    attempts: int
    error: str | None
    died_at: datetime


@dataclass(frozen=True)
class LockRow:
    holds: str  # "job 4017", "maintenance leader", "migrations"
    pid: int
    application_name: str | None


@dataclass(frozen=True)
class Snapshot:
    depth: dict[str, int]
    queues: dict[str, dict[str, int]]
    totals: dict[str, int]
    workers: list[WorkerRow]
    oldest_pending: OldestPending | None
    recent_failures: list[RecentFailure]
    dead_letters_waiting: int
    dead_letters: list[DeadRow]
    advisory_locks: list[LockRow]
    paused_queues: list[str]
    # Pending jobs per type that no live worker has a handler for (jobq.handlers.known).
    no_handler: dict[str, int]
    limits: list[KeyRule] = field(default_factory=list)  # rules on keys, with their use (jobq.limits)
    queue_limits: list[QueueLimits] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        values = _jsonable(asdict(self))
        values["limits"] = [rule.to_dict() for rule in self.limits]  # rates as "N/m"
        values["queue_limits"] = [limits.to_dict() for limits in self.queue_limits]
        return values


def snapshot(conn: Connection, *, namespace: int) -> Snapshot:
    """Everything `jobq inspect` shows, read now."""
    c = counts(conn=conn)
    queues = {queue: {s: depths.get(s, 0) for s in STATUSES} for queue, depths in sorted(c.queues.items())}
    workers = [WorkerRow(*row) for row in conn.execute(WORKER_LIST)]
    pending_queues = [q for q, depths in queues.items() if depths["pending"]]
    oldest = conn.execute(JOB_GET_OLDEST_DUE, {"queues": pending_queues}).fetchone()  # oldest first
    failures = [
        RecentFailure(*row[:6], last_line(row[6]), row[7])
        for row in conn.execute(JOB_LIST_RECENT_FAILURES, {"limit": RECENT})
    ]
    waiting = int(conn.execute(DEAD_LETTER_COUNT_WAITING).fetchone()[0])  # type: ignore[index]
    dead = [
        DeadRow(*row[:5], last_line(row[5]), row[6])
        for row in conn.execute(DEAD_LETTER_LIST_WAITING, {"limit": RECENT})
    ]
    paused = [name for name, paused_at, _, _ in conn.execute(QUEUE_LIST) if paused_at is not None]
    held = conn.execute(ADVISORY_LOCK_LIST_OF_NAMESPACE, {"mask": locks.ID_MASK, "namespace": namespace})
    pending = {job_type: depths.get("pending", 0) for job_type, depths in c.types.items()}
    unhandled = known.pending_without_handler(pending, known.declared(conn=conn))
    return Snapshot(
        depth=c.depth,
        queues=queues,
        totals=dict(sorted(c.totals.items())),
        workers=workers,
        oldest_pending=OldestPending(*oldest) if oldest else None,
        recent_failures=failures,
        dead_letters_waiting=waiting,
        dead_letters=dead,
        advisory_locks=[LockRow(_lock_name(value), pid, app) for value, pid, app in held],
        paused_queues=paused,
        no_handler=unhandled,
        limits=list_limits(conn=conn),
        queue_limits=queue_limits(conn=conn),
    )


def _lock_name(value: int) -> str:
    if value == locks.MAINTENANCE_LEADER:
        return "maintenance leader"
    if value == locks.MIGRATIONS:
        return "migrations"
    return f"job {value}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value
