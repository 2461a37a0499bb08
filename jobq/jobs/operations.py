"""Bulk operations: one action on every job matching a filter (``cancel``, ``retry``,
``delete``, ``run_now``, ``set_priority``), or on every waiting letter of a dead-letter
group (``replay``, ``discard``), however many rows that is.

The life of one, each step on the connection of its runner:

- :func:`start` records it in ``jobq_operations`` (state ``running``) and takes its
  runner's session advisory lock (:func:`jobq.store.locks.operation_key`) in the same
  transaction, so that nobody ever sees it running without an owner; it acts on the
  rows that exist then (up to the newest id, kept in ``params.last_id``).
- :func:`run` carries it out in chunks of :data:`CHUNK` rows in id order (a keyset walk
  from ``cursor``). Each chunk is one transaction: its rows locked ``SKIP LOCKED`` (a
  row another session holds, a worker's claim in flight, is skipped, not waited for),
  the rows not eligible for the action skipped too (a delete never touches a claimed
  or running job), and the cursor and counts advanced in the same commit; so a
  runner that dies loses nothing and repeats nothing. Never a lock on the whole table.
- A runner that vanished (its process killed, a deploy) leaves the operation running
  with its lock free: :func:`resume_stalled` (the daemon's maintenance leader) takes
  the lock and carries it on.

Each operation leaves two audit rows under its actor: ``bulk_<action>`` when it starts
(counts ``{"state": "running"}``) and when it ends (state, matched, changed, skipped).
A dry run (:func:`count`) changes nothing and leaves none.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from jobq import settings
from jobq.store.sql.dead_letters import (
    DEAD_LETTER_DISCARD_IF_WAITING,
    DEAD_LETTER_GROUP_EXISTS,
    DEAD_LETTER_REPLAY_IF_WAITING,
)
from jobq.store.sql.ledger import JOB_LIST_COUNT
from jobq.store.sql.operations import (
    DEAD_LETTER_CHUNK_OF_GROUP,
    DEAD_LETTER_GET_LAST_ID,
    JOB_CHUNK_ORDER,
    JOB_CHUNK_SELECT,
    JOB_DELETE_IF_NOT_IN_FLIGHT,
    JOB_GET_LAST_ID,
    JOB_SET_PRIORITY_IF_PENDING,
    OPERATION_ADVANCE_IF_AT_CURSOR,
    OPERATION_FINISH_IF_RUNNING,
    OPERATION_GET,
    OPERATION_INSERT,
    OPERATION_LIST_RUNNING,
    OPERATION_LOCK,
    OPERATION_TRY_LOCK,
    OPERATION_UNLOCK,
)
from jobq.jobs import audit
from jobq.jobs import control
from jobq.store import connections
from jobq.store import locks
from jobq.store.connections import Connection, connection
from jobq.errors import DeadLetterGroupNotFound, InvalidArgument, OperationNotFound
from jobq.jobs.filters import JobFilter, parse_filter
from jobq.jobs.ledger import fetch_by_id
from jobq.spec import MAX_PRIORITY, MIN_PRIORITY

log = logging.getLogger(__name__)

CHUNK = 1000  # rows per transaction
JOB_ACTIONS = ("cancel", "retry", "delete", "run_now", "set_priority")
GROUP_ACTIONS = ("replay", "discard")
RESUME_BUDGET = 2.0  # seconds of work per maintenance pass on stalled operations
GROUP_ID_PATTERN = r"^[0-9a-f]{16}$"
CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


@dataclass(frozen=True, slots=True)
class Operation:
    """A snapshot of one row of ``jobq_operations``. ``matched``, ``changed`` and
    ``skipped`` count the rows of the chunks done so far; ``cursor`` is the last id done."""

    id: int
    action: str
    target: dict[str, Any]
    params: dict[str, Any]
    actor: str
    state: str
    matched: int
    changed: int
    skipped: int
    cursor: int
    error: str | None
    created_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        """As the API shows it: ``started_at`` is when it was recorded."""
        return {
            "id": self.id, "action": self.action, "target": self.target, "params": self.params,
            "actor": self.actor, "state": self.state, "matched": self.matched, "changed": self.changed,
            "skipped": self.skipped, "error": self.error, "started_at": self.created_at.isoformat(),
            "heartbeat_at": self.heartbeat_at.isoformat(),
            "finished_at": None if self.finished_at is None else self.finished_at.isoformat(),
        }


def get(operation_id: int, *, conn: Connection | None = None) -> Operation:
    """One operation. Raises :class:`OperationNotFound`."""
    return fetch_by_id(Operation, OPERATION_GET, operation_id, OperationNotFound, conn)


def count(job_filter: JobFilter | dict[str, Any], *, conn: Connection | None = None) -> int:
    """How many jobs match ``job_filter`` now: a dry run, changing nothing."""
    job_filter = parse_filter(job_filter, prefix="filter.")
    with connection(conn) as c:
        counted = sql.SQL(JOB_LIST_COUNT).format(conditions=job_filter.conditions())
        row = c.execute(counted, job_filter.params()).fetchone()
    assert row is not None
    return int(row[0])


def check_job_action(action: str, job_filter: JobFilter | dict[str, Any], priority: int | None) -> JobFilter:
    """The validated filter of a bulk action on jobs; raises :class:`InvalidArgument`
    naming ``action``, ``priority`` (required by set_priority alone, 1-10) or the
    filter's bad field (``filter.status``), or ``filter`` when it names no criterion:
    an empty filter would act on every job."""
    if action not in JOB_ACTIONS:
        raise InvalidArgument("action", f"must be one of {', '.join(JOB_ACTIONS)}")
    if action == "set_priority":
        if isinstance(priority, bool) or not isinstance(priority, int) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise InvalidArgument("priority", f"set_priority needs a priority from {MIN_PRIORITY} to {MAX_PRIORITY}")
    elif priority is not None:
        raise InvalidArgument("priority", "only set_priority takes a priority")
    job_filter = parse_filter(job_filter, prefix="filter.")
    if not job_filter.given():
        raise InvalidArgument("filter", "name at least one criterion (an empty filter would match every job)")
    return job_filter


def start(
    conn: Connection,
    action: str,
    *,
    actor: str,
    job_filter: JobFilter | dict[str, Any] | None = None,
    priority: int | None = None,
    dead_letter_group: str | None = None,
) -> Operation:
    """Record an operation on ``conn`` (autocommit: committed here) with its runner's
    lock held by this session; :func:`run` on the same connection carries it out.

    On jobs: ``job_filter`` and an action of :data:`JOB_ACTIONS` (see
    :func:`check_job_action`). On a dead-letter group: ``dead_letter_group`` and an
    action of :data:`GROUP_ACTIONS`; raises :class:`DeadLetterGroupNotFound` for a
    group never seen.
    """
    _require_autocommit(conn)
    params: dict[str, Any] = {}
    if dead_letter_group is None:
        checked = check_job_action(action, job_filter or {}, priority)
        target: dict[str, Any] = {"filter": checked.to_json()}
        last_id_query = JOB_GET_LAST_ID
        if priority is not None:
            params["priority"] = priority
    else:
        if action not in GROUP_ACTIONS:
            raise InvalidArgument("action", f"must be one of {', '.join(GROUP_ACTIONS)}")
        target = {"dead_letter_group": dead_letter_group}
        last_id_query = DEAD_LETTER_GET_LAST_ID
    with connections.database_errors(), conn.transaction():
        if dead_letter_group is not None:
            if not conn.execute(DEAD_LETTER_GROUP_EXISTS, {"id": dead_letter_group}).fetchone()[0]:  # type: ignore[index]
                raise DeadLetterGroupNotFound(dead_letter_group)
        params["last_id"] = conn.execute(last_id_query).fetchone()[0]  # type: ignore[index]
        with conn.cursor(row_factory=class_row(Operation)) as cur:
            operation = cur.execute(
                OPERATION_INSERT,
                {"action": action, "target": json.dumps(target), "params": json.dumps(params), "actor": actor},
            ).fetchone()
        assert operation is not None
        conn.execute(OPERATION_LOCK, _key(operation.id))
        audit.record(conn, actor, f"bulk_{action}", {"operation": operation.id, **target}, {"state": "running"})
    log.info("operation.started operation=%s action=%s actor=%s", operation.id, action, actor)
    return operation


def start_in_background(url: str, action: str, **kwargs: Any) -> Operation:
    """:func:`start` on a new connection of its own, then :func:`run` in a daemon thread
    that closes it at the end (the API's way: the request answers at once). If the
    process dies first, :func:`resume_stalled` finishes the operation."""
    conn = connections.connect(url, application_name="jobq operation")
    try:
        operation = start(conn, action, **kwargs)
    except BaseException:
        conn.close()
        raise
    threading.Thread(target=_run_and_close, args=(conn, operation), name=f"jobq-operation-{operation.id}", daemon=True).start()
    return operation


def run(
    conn: Connection,
    operation: Operation,
    *,
    chunk: int = CHUNK,
    budget: float | None = None,
    on_chunk: Callable[[Operation], None] | None = None,
) -> Operation:
    """Carry out ``operation``, whose lock this session holds, chunk by chunk until no
    row is left (state ``done``) or ``budget`` seconds have passed; then release its lock
    and return it as it is. ``on_chunk`` sees it after each chunk (a progress bar).

    A lost connection raises DatabaseUnavailable and leaves it running (its lock went
    with the session; :func:`resume_stalled` goes on from the last chunk committed).
    Any other database error ends it ``failed`` with the error's first line.
    """
    _require_autocommit(conn)
    deadline = None if budget is None else time.monotonic() + budget
    select_chunk, act = _steps(operation)
    try:
        with connections.database_errors():
            try:
                while operation.state == "running" and (deadline is None or time.monotonic() < deadline):
                    with conn.transaction():
                        ids = select_chunk(conn, operation.cursor, chunk)
                        if ids:
                            operation = _advance(conn, operation, ids, act(conn, operation, ids))
                        else:
                            operation = _finish(conn, operation, "done", None)
                    if on_chunk is not None:
                        on_chunk(operation)
            except psycopg.Error as exc:
                if isinstance(exc, CONNECTION_ERRORS):
                    raise
                log.error("operation.failed operation=%s error=%s: %s", operation.id, type(exc).__name__, connections.first_line(exc))
                with conn.transaction():
                    operation = _finish(conn, operation, "failed", connections.first_line(exc))
    finally:
        if not conn.closed and not conn.broken:
            conn.execute(OPERATION_UNLOCK, _key(operation.id))
    return operation


def resume_stalled(conn: Connection, *, budget: float | None = None) -> int:
    """Carry on the running operations whose runner is gone (their lock is free), oldest
    first, on ``conn`` (autocommit), until each is done or ``budget`` seconds have
    passed (the rest waits for the next call). Returns how many it worked on; logs
    only when it did."""
    _require_autocommit(conn)
    deadline = None if budget is None else time.monotonic() + budget
    worked = 0
    for (operation_id,) in conn.execute(OPERATION_LIST_RUNNING).fetchall():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        if not conn.execute(OPERATION_TRY_LOCK, _key(operation_id)).fetchone()[0]:  # type: ignore[index]
            continue  # its runner is alive
        operation = get(operation_id, conn=conn)
        if operation.state != "running":  # finished between the listing and the lock
            conn.execute(OPERATION_UNLOCK, _key(operation_id))
            continue
        log.info("operation.resumed operation=%s action=%s cursor=%s", operation.id, operation.action, operation.cursor)
        run(conn, operation, budget=left)
        worked += 1
    return worked


def _steps(operation: Operation) -> tuple[Callable[[Connection, int, int], list[int]], Callable[..., int]]:
    """How to find the next chunk's ids, and what to do to them (returning how many changed)."""
    last_id = operation.params["last_id"]
    if "dead_letter_group" in operation.target:
        group_id = operation.target["dead_letter_group"]

        def select_letters(conn: Connection, cursor: int, size: int) -> list[int]:
            params = {"group_id": group_id, "cursor": cursor, "last_id": last_id, "chunk": size}
            return [row[0] for row in conn.execute(DEAD_LETTER_CHUNK_OF_GROUP, params)]

        return select_letters, _GROUP_ACTIONS[operation.action]
    job_filter = JobFilter.model_validate(operation.target["filter"])
    conditions = sql.SQL(" AND ") + job_filter.conditions() if job_filter.given() else sql.SQL("")
    query = sql.SQL(JOB_CHUNK_SELECT) + conditions + sql.SQL(JOB_CHUNK_ORDER)
    filter_params = job_filter.params()

    def select_jobs(conn: Connection, cursor: int, size: int) -> list[int]:
        params = {**filter_params, "cursor": cursor, "last_id": last_id, "chunk": size}
        return [row[0] for row in conn.execute(query, params)]

    return select_jobs, _JOB_ACTIONS[operation.action]


def _changed(statement: str) -> Callable[[Connection, Operation, list[int]], int]:
    def act(conn: Connection, operation: Operation, ids: list[int]) -> int:
        return connections.again_if_moved(conn, statement, {"ids": ids, **operation.params}).rowcount

    return act


_JOB_ACTIONS: dict[str, Callable[[Connection, Operation, list[int]], int]] = {
    "cancel": lambda conn, op, ids: len(control.cancel_ids(conn, ids, op.actor)),
    "retry": lambda conn, op, ids: len(control.retry_ids(conn, ids)),
    "run_now": lambda conn, op, ids: len(control.run_now_ids(conn, ids)),
    "delete": _changed(JOB_DELETE_IF_NOT_IN_FLIGHT),
    "set_priority": _changed(JOB_SET_PRIORITY_IF_PENDING),
}
_GROUP_ACTIONS: dict[str, Callable[[Connection, Operation, list[int]], int]] = {
    "replay": _changed(DEAD_LETTER_REPLAY_IF_WAITING),
    "discard": _changed(DEAD_LETTER_DISCARD_IF_WAITING),
}


def _advance(conn: Connection, operation: Operation, ids: list[int], changed: int) -> Operation:
    params = {
        "id": operation.id, "cursor": operation.cursor, "next": max(ids),
        "matched": len(ids), "changed": changed, "skipped": len(ids) - changed,
    }
    with conn.cursor(row_factory=class_row(Operation)) as cur:
        advanced = cur.execute(OPERATION_ADVANCE_IF_AT_CURSOR, params).fetchone()
    if advanced is None:
        # Two runners of one operation: the advisory lock makes this impossible; roll
        # the chunk back rather than count it twice.
        raise RuntimeError(f"operation {operation.id} moved under its runner (cursor {operation.cursor})")
    return advanced


def _finish(conn: Connection, operation: Operation, state: str, error: str | None) -> Operation:
    with conn.cursor(row_factory=class_row(Operation)) as cur:
        finished = cur.execute(
            OPERATION_FINISH_IF_RUNNING, {"id": operation.id, "state": state, "error": error}
        ).fetchone()
    if finished is None:
        return get(operation.id, conn=conn)
    counts = {"state": state, "matched": finished.matched, "changed": finished.changed, "skipped": finished.skipped}
    audit.record(conn, finished.actor, f"bulk_{finished.action}", {"operation": finished.id, **finished.target}, counts)
    log.info(
        "operation.finished operation=%s action=%s state=%s matched=%s changed=%s skipped=%s",
        finished.id, finished.action, state, finished.matched, finished.changed, finished.skipped,
    )
    return finished


def _run_and_close(conn: Connection, operation: Operation) -> None:
    with conn:
        try:
            run(conn, operation)
        except Exception as exc:  # the thread's end: logged, and left to resume_stalled
            log.warning("operation.interrupted operation=%s error=%s", operation.id, connections.first_line(exc))


def _key(operation_id: int) -> dict[str, int]:
    high, low = locks.operation_key(settings.current().advisory_namespace, operation_id)
    return {"high": high, "low": low}


def _require_autocommit(conn: Connection) -> None:
    if not conn.autocommit:
        raise ValueError("bulk operations need an autocommit connection: each chunk is its own transaction")

