"""Handlers for benchmark/outcomes.py, loaded by its workers through JOBQ_HANDLERS: each
ends its job one way, as fast as it can (the built-in ``noop`` and ``always_fail``
cover a success and a failure)."""

from __future__ import annotations

import jobq

RETRY_AFTER = 0.1  # seconds: a failed or snoozed job is due again this soon


@jobq.register("fails_once")
def fails_once(job: jobq.Job) -> None:
    """Fails its first attempt, succeeds on its retry."""
    if job.attempt == 0:
        raise RuntimeError("the first attempt fails")


@jobq.register("snoozes_once")
def snoozes_once(job: jobq.Job) -> None:
    """Snoozes RETRY_AFTER seconds on its first run, succeeds on its next."""
    if job.snoozes == 0:
        raise jobq.Snooze(RETRY_AFTER)


@jobq.register("async_noop")
async def async_noop(job: jobq.Job) -> None:
    return None
