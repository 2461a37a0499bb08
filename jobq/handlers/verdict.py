"""What a run comes to, by the handler's policy and the settings: a success, a cancel, a
snooze (a failed run past JOBQ_MAX_SNOOZES), a failure that the handler's policy sends
to the dead letters now, or a failure retried after the handler's backoff (or the
global one). Pure: a worker (:mod:`jobq.daemon.worker.outcomes`) and ``jobq_drain``
(:mod:`jobq.testing.drain`) record what it says, each in its own way."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from jobq.handlers.execution import RunResult
from jobq.handlers.registry import Handler
from jobq.job import Job
from jobq.settings import Settings

log = logging.getLogger(__name__)


@dataclass(slots=True)  # not frozen: one a job (see RunResult)
class Verdict:
    """The run's result as it is to be recorded, and for a failure or a snooze the delay
    before the job is due again (and the retries its handler allows)."""

    result: RunResult
    delay: float = 0.0
    max_retries: int | None = None


def decide(job: Job, result: RunResult, handler: Handler | None, settings: Settings) -> Verdict:
    """What the run of ``job`` by ``handler`` that produced ``result`` comes to."""
    if result.ok:
        return Verdict(result)
    if result.snooze is not None:
        if job.snoozes < settings.max_snoozes:
            return Verdict(result, result.snooze)
        error = f"snoozed {job.snoozes} times, the most JOBQ_MAX_SNOOZES allows; this snooze is a failed run"
        result = replace(result, error=error, error_kind="Snooze", snooze=None)
    if result.not_retried is not None:  # the handler's policy: dead now, no retry spent
        return Verdict(result, 0.0, job.attempt)
    delay = handler.retry_delay(job.attempt) if handler is not None else None
    if delay is None:
        if handler is not None and handler.backoff is not None:
            log.error("job.backoff_failed id=%s type=%s: the handler's backoff gave no delay; the global one is used",
                      job.id, job.type)
        delay = settings.retry_delay(job.attempt)
    return Verdict(result, delay, handler.max_retries if handler else None)
