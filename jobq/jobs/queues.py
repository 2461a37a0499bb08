"""Queues as an operator sees them: pause and resume them, and list every queue known.

A paused queue's jobs are not claimed by any worker (:data:`jobq.store.sql.leases.JOB_CLAIM`
leaves paused queues out), and idle workers do not wait on its due jobs; enqueueing
continues and running jobs finish. The pause is a row of ``jobq_queues``, so it
survives restarts and deploys, and a queue can be paused before it has a job.
Pausing is announced on the ``jobq_control`` channel (``pause <queue>``), on which
the workers give back, unstarted, the jobs of that queue they already hold; resuming
announces ``resume <queue>`` and wakes idle workers at once (channel ``jobq``, as an
enqueue does).

Pausing a paused queue changes nothing: it keeps the first pause's time, actor and
reason (and is audited with ``changed: 0``); resuming a queue that is not paused
likewise. Every pause and resume writes its audit row in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import jobq.settings
from jobq.store.sql.queues import (
    JOB_GET_OLDEST_DUE,
    QUEUE_LIST,
    QUEUE_LIST_NEVER_NAMED,
    QUEUE_PAUSE_IF_NOT_PAUSED,
    QUEUE_RESUME_IF_PAUSED,
)
from jobq.store.sql.workers import WORKER_LIST_ACTIVE_QUEUES
from jobq.jobs import audit
from jobq.store.connections import Connection, connection
from jobq.errors import InvalidArgument
from jobq.job import STATUSES
from jobq.jobs.ledger import counts
from jobq.spec import MAX_QUEUE_LENGTH, check_text

MAX_REASON_LENGTH = 1000


@dataclass(frozen=True, slots=True)
class Queue:
    """One queue now: its pause, its depth per status (exact, from the counters), the
    live workers serving it, and how long its oldest due pending job has been due."""

    name: str
    paused: bool
    paused_at: datetime | None
    paused_by: str | None
    reason: str | None
    depth: dict[str, int]
    workers: int
    oldest_pending_age_seconds: float | None

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["paused_at"] = self.paused_at.isoformat() if self.paused_at else None
        return values


@dataclass(frozen=True, slots=True)
class Change:
    """What a pause or resume did: the queues it named, those whose state changed, and
    those no job, pause, worker or schedule had ever named (most likely a typo)."""

    queues: list[str]
    changed: list[str]
    unknown: list[str] = field(default_factory=list)


def check_name(name: Any, field: str = "name") -> str:
    """Return ``name`` if it is a queue name as JobSpec takes one (1 to 100 characters
    PostgreSQL can store); raise :class:`InvalidArgument` naming ``field`` otherwise."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_QUEUE_LENGTH:
        raise InvalidArgument(field, f"must be a string of 1 to {MAX_QUEUE_LENGTH} characters")
    try:
        return check_text(name)
    except ValueError as exc:
        raise InvalidArgument(field, str(exc)) from None


def pause(
    name: str, *, reason: str | None = None, actor: str | None = None, conn: Connection | None = None
) -> Change:
    """Pause one queue (creating its row if it has none). When this returns (and, on
    ``conn``, the caller has committed), no worker claims its jobs. Raises
    :class:`InvalidArgument` for a bad name or reason."""
    return _pause([check_name(name)], reason, actor, conn, target={"queue": name})


def pause_all(*, reason: str | None = None, actor: str | None = None, conn: Connection | None = None) -> Change:
    """Pause every queue known now (:func:`names`); a queue that first appears later is
    not paused."""
    with connection(conn) as c:
        return _pause(names(conn=c), reason, actor, c, target={"all": True})


def resume(name: str, *, actor: str | None = None, conn: Connection | None = None) -> Change:
    """Resume one queue: its due jobs are claimed again, idle workers woken at once."""
    return _resume([check_name(name)], actor, conn, target={"queue": name})


def resume_all(*, actor: str | None = None, conn: Connection | None = None) -> Change:
    """Resume every paused queue."""
    return _resume(None, actor, conn, target={"all": True})


def names(*, stale_seconds: float | None = None, conn: Connection | None = None) -> list[str]:
    """Every queue known: from the counters, ``jobq_queues`` and the live workers."""
    return [queue.name for queue in list_queues(stale_seconds=stale_seconds, conn=conn)]


def with_pending(conn: Connection) -> list[str]:
    """The queues that hold pending jobs now, due or scheduled (from the counters: a
    small table, no jobs scan), by name: what a worker with ``--all-queues`` serves."""
    return sorted(queue for queue, depth in counts(conn=conn).queues.items() if depth.get("pending"))


def list_queues(*, stale_seconds: float | None = None, conn: Connection | None = None) -> list[Queue]:
    """Every queue known (from the counters, ``jobq_queues`` and the workers whose
    heartbeat is younger than ``stale_seconds``, by default JOBQ_STALE_THRESHOLD), by
    name. Bounded reads only: the counters, two small tables, and one index probe per
    queue with pending jobs. Raises DatabaseUnavailable."""
    if stale_seconds is None:
        stale_seconds = jobq.settings.current().stale_threshold
    with connection(conn) as c:
        with c.pipeline():
            cur_paused = c.execute(QUEUE_LIST)
            cur_workers = c.execute(WORKER_LIST_ACTIVE_QUEUES, {"stale_seconds": stale_seconds})
            reading = counts(conn=c)
            pending = [q for q, depth in reading.queues.items() if depth.get("pending")]
            cur_oldest = c.execute(JOB_GET_OLDEST_DUE, {"queues": pending})
            rows = {name: (at, by, reason) for name, at, by, reason in cur_paused.fetchall()}
            worker_queues = cur_workers.fetchall()
            oldest = {queue: age for _, _, queue, _, age in cur_oldest.fetchall()}
    known = set(reading.queues) | set(rows) | {q for queues, _ in worker_queues for q in queues}
    listed = []
    for name in sorted(known):
        paused_at, paused_by, reason = rows.get(name, (None, None, None))
        depth = reading.queues.get(name, {})
        listed.append(
            Queue(
                name=name,
                paused=paused_at is not None,
                paused_at=paused_at,
                paused_by=paused_by,
                reason=reason,
                depth={status: int(depth.get(status, 0)) for status in STATUSES},
                workers=sum(1 for queues, every in worker_queues if every or name in queues),
                oldest_pending_age_seconds=oldest.get(name),
            )
        )
    return listed


def _pause(
    queue_names: Sequence[str], reason: str | None, actor: str | None, conn: Connection | None, target: dict[str, Any]
) -> Change:
    if reason is not None:
        _check_reason(reason)
    actor = actor or audit.library_actor()
    wanted = sorted(set(queue_names))
    with connection(conn) as c, c.transaction():
        unknown = _never_named(c, wanted)
        params = {"names": wanted, "actor": actor, "reason": reason}
        rows = c.execute(QUEUE_PAUSE_IF_NOT_PAUSED, params).fetchall()
        changed = sorted(name for name, _ in rows)
        audit.record(c, actor, "pause", {**target, "reason": reason}, {"queues": len(wanted), "changed": len(changed)})
    return Change(wanted, changed, unknown)


def _resume(
    queue_names: Iterable[str] | None, actor: str | None, conn: Connection | None, target: dict[str, Any]
) -> Change:
    actor = actor or audit.library_actor()
    wanted = None if queue_names is None else sorted(set(queue_names))
    with connection(conn) as c, c.transaction():
        unknown = _never_named(c, wanted) if wanted is not None else []
        rows = c.execute(QUEUE_RESUME_IF_PAUSED, {"names": wanted}).fetchall()
        changed = sorted(name for name, *_ in rows)
        audit.record(c, actor, "resume", target, {"changed": len(changed)})
    return Change(changed if wanted is None else wanted, changed, unknown)


def _never_named(conn: Connection, names: list[str]) -> list[str]:
    return [name for (name,) in conn.execute(QUEUE_LIST_NEVER_NAMED, {"names": names})]


def _check_reason(reason: Any) -> None:
    if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH:
        raise InvalidArgument("reason", f"must be a string of at most {MAX_REASON_LENGTH} characters")
    try:
        check_text(reason)
    except ValueError as exc:
        raise InvalidArgument("reason", str(exc)) from None
