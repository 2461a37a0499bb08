"""The ``workers`` table: worker processes announce themselves (with the periodic
schedules their modules declare), beat, and leave."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from jobq.store.sql.workers import (
    WORKER_DECLARE_SCHEDULES,
    WORKER_DELETE,
    WORKER_DELETE_IF_STALE,
    WORKER_HEARTBEAT,
    WORKER_LOCK_BUDGET,
    WORKER_REGISTER,
    WORKER_STOP_WAITING,
)
from jobq.store.connections import Connection


def worker_name(hostname: str, pid: int, token: str) -> str:
    """A worker's id, in ``workers.id`` and ``jobs.worker_id``: host, pid, and a token
    drawn at spawn so that a reused pid is a different worker."""
    return f"{hostname}:{pid}:{token}"


def register(
    conn: Connection,
    worker_id: str,
    hostname: str,
    pid: int,
    queues: Sequence[str],
    *,
    all_queues: bool = False,
    handler_types: Sequence[str] | None = None,
) -> None:
    """Announce a worker: the queues it serves (``all_queues``: every queue, ``queues``
    then empty) and the job types it has handlers for (None: not said)."""
    conn.execute(WORKER_REGISTER, {
        "id": worker_id, "hostname": hostname, "pid": pid, "queues": list(queues), "all_queues": all_queues,
        "handler_types": None if handler_types is None else sorted(handler_types),
    })


def declare(conn: Connection, worker_id: str, schedules: Mapping[str, str]) -> None:
    """Record on the worker's row the schedules it declares (name -> definition hash);
    a schedule fires while a live worker declares it."""
    conn.execute(WORKER_DECLARE_SCHEDULES, {"id": worker_id, "schedules": json.dumps(dict(schedules))})


def beat(conn: Connection, worker_id: str, current_job_id: int | None, jobs_done: int) -> bool:
    """Refresh the worker's row; False when the row is gone (removed as stale while
    the process was stopped): register again."""
    cur = conn.execute(
        WORKER_HEARTBEAT, {"id": worker_id, "current_job_id": current_job_id, "jobs_done": jobs_done}
    )
    return cur.rowcount == 1


def lock_budget(conn: Connection, worker_id: str) -> int:
    """How many jobs a worker may hold claimed now, by the server's lock table
    (WORKER_LOCK_BUDGET): its claims never take more."""
    return int(conn.execute(WORKER_LOCK_BUDGET, {"id": worker_id}).fetchone()[0])


def stop_waiting(conn: Connection, worker_id: str) -> None:
    """The worker is handed no more jobs (schema 28); an enqueue handing it one now is
    waited for (its own short transaction), so that what it handed can be taken back."""
    conn.execute(WORKER_STOP_WAITING, {"id": worker_id})


def leave(conn: Connection, worker_id: str) -> None:
    conn.execute(WORKER_DELETE, {"id": worker_id})


def remove_stale(conn: Connection, stale_seconds: float) -> list[str]:
    """Delete the rows of workers whose heartbeat stopped; return their ids."""
    return [row[0] for row in conn.execute(WORKER_DELETE_IF_STALE, {"stale_seconds": stale_seconds})]
