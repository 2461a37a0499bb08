"""The worker processes as an operator sees them: :func:`list_workers` reads the
``workers`` table (a few rows) with the job each one runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobq import queries
from jobq.db import Connection, connection


@dataclass(frozen=True, slots=True)
class Worker:
    """One registered worker process now. ``job_*`` describe the job it runs (None when
    idle); ``job_running_seconds`` counts from the job's start (or its claim)."""

    id: str
    hostname: str
    pid: int
    queues: list[str]
    current_job_id: int | None
    jobs_done: int
    started_at: datetime
    heartbeat_age_seconds: float
    job_type: str | None
    job_status: str | None
    job_progress: dict[str, Any] | None
    job_running_seconds: float | None

    def live(self, stale_seconds: float) -> bool:
        """Whether its heartbeat is younger than ``stale_seconds`` (JOBQ_STALE_THRESHOLD)."""
        return self.heartbeat_age_seconds < stale_seconds


def list_workers(*, conn: Connection | None = None) -> list[Worker]:
    """Every registered worker, by host and pid, with the job it runs: one statement."""
    with connection(conn) as c:
        return [Worker(*row) for row in c.execute(queries.WORKER_LIST_WITH_JOB)]
