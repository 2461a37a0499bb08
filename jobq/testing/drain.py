"""Running due jobs in the test's own process: what ``jobq_drain`` does.

The same steps as a worker, through the library's functions (never the daemon's): a
claim with new leases and advisory locks (:func:`jobq.jobs.leases.claim`), the handler
called where a worker calls it (:func:`jobq.handlers.execution.run`: the one place
handler exceptions are caught; ``async def`` handlers on this process's event loop),
what the run comes to by the handler's policy (:func:`jobq.handlers.verdict.decide`),
and its outcome written under its lease (``leases.complete``, ``fail``, ``snooze``,
``cancel``). One job at a time, on a connection of its own that commits each step.

Not enforced in-process: handlers' timeouts (a worker is killed past its job's deadline
by the supervisor; here a handler runs as long as it runs) and the cancel grace. A job
retried with a backoff, snoozed or scheduled later is not due yet: a drain leaves it
pending (call it again after the delay, or give the handler ``backoff=0``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from jobq import settings as jobq_settings
from jobq.handlers import context, execution, registry
from jobq.handlers.verdict import decide
from jobq.job import Job
from jobq.jobs import leases, queues as jobq_queues
from jobq.jobs.ledger import get
from jobq.store import connections, locks

MAX_RUNS = 1000  # a drain that ran this many jobs is stuck in a loop of jobs making jobs


@dataclass(frozen=True, slots=True)
class Ran:
    """One run of a drain: the job as its handler got it, and the job as it is after its
    outcome was written (``after.status``: done, pending again (a retry or a snooze),
    dead or cancelled; ``after.result``, ``after.error``)."""

    job: Job
    after: Job

    @property
    def status(self) -> str:
        return self.after.status

    @property
    def result(self) -> object:
        return self.after.result

    @property
    def error(self) -> str | None:
        return self.after.error


def drain(queues: list[str] | None = None, *, max_runs: int = MAX_RUNS) -> list[Ran]:
    """Run every due job of ``queues`` (None: every queue with pending jobs) one at a
    time, jobs that runs enqueue included, until none is due; return the runs in order.
    Uses ``DATABASE_URL`` (what ``jobq_database`` points it at). Raises RuntimeError
    after ``max_runs`` runs."""
    current = jobq_settings.current()
    lock_base = locks.key(current.advisory_namespace, 0)
    worker_id = f"jobq-drain-{os.getpid()}"
    ran: list[Ran] = []
    with connections.connect(current.require_database_url(), application_name=worker_id) as conn:
        while True:
            names = queues if queues is not None else jobq_queues.with_pending(conn)
            claimed = leases.claim(conn, names, worker_id=worker_id, limit=1, lock_base=lock_base).result() if names else []
            if not claimed:
                return ran
            if len(ran) >= max_runs:
                raise RuntimeError(f"jobq_drain ran {max_runs} jobs and more are due: jobs enqueue each other forever?")
            (claim,) = claimed
            _run(conn, claim, worker_id, lock_base, current)
            ran.append(Ran(claim.job, get(claim.job_id, conn=conn)))


def _run(
    conn: connections.Connection, claim: leases.Claim, worker_id: str, lock_base: int, current: jobq_settings.Settings
) -> None:
    """Start, run and record one claimed job, as a worker would."""
    leases.start(conn, [claim], [0.0]).result()
    handler = registry.find(claim.job.type)
    result = execution.run(claim.job, handler, context.Run(claim.job_id))
    verdict = decide(claim.job, result, handler, current)
    result = verdict.result
    if result.cancelled:
        leases.cancel(conn, [claim], actor=f"worker:{worker_id}", lock_base=lock_base).result()
    elif result.ok:
        leases.complete(conn, [claim], [result.result_json or "null"], [result.seconds], lock_base=lock_base).result()
    elif result.snooze is not None:
        leases.snooze(conn, [claim], [verdict.delay], lock_base=lock_base).result()
    else:
        leases.fail(
            conn, [claim], [result.error or ""], [verdict.delay], [result.seconds],
            max_retries=[verdict.max_retries], spans=[result.span], lock_base=lock_base,
        ).result()
