"""The worker processes as an operator sees them: :func:`list_workers` reads the
``workers`` table (a few rows) with the job each one runs."""

from __future__ import annotations

from dataclasses import dataclass

from jobq.store.sql.workers import WORKER_LIST_WITH_JOB
from jobq.store.connections import Connection, connection
from jobq.observe.inspection import WorkerRow


@dataclass(frozen=True)
class RegisteredWorker(WorkerRow):
    """One registered worker process now, as `jobq inspect` shows it (its job's
    ``progress`` included), and the type and status of the job it runs and how long it
    has run (from its start, or its claim); None when idle."""

    job_type: str | None = None
    job_status: str | None = None
    job_running_seconds: float | None = None

    def live(self, stale_seconds: float) -> bool:
        """Whether its heartbeat is younger than ``stale_seconds`` (JOBQ_STALE_THRESHOLD)."""
        return self.heartbeat_age_seconds < stale_seconds


def list_workers(*, conn: Connection | None = None) -> list[RegisteredWorker]:
    """Every registered worker, by host and pid, with the job it runs: one statement."""
    with connection(conn) as c:
        return [RegisteredWorker(*row) for row in c.execute(WORKER_LIST_WITH_JOB)]
