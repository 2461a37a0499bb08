"""``async def`` job types for the tests of async handlers in the real daemon
(tests/test_aio_handlers.py), loaded by workers through JOBQ_HANDLERS beside
``support.handlers``. A handler that meets ``asyncio.CancelledError`` writes a line to
the file its payload names, so a test can tell that the task was cancelled (not the
process killed)."""

from __future__ import annotations

import asyncio
import os

import jobq


def _note(job: jobq.Job, line: str) -> None:
    with open(job.payload["mark"], "a") as mark:
        mark.write(f"{line} {os.getpid()}\n")


@jobq.register("async_add")
async def async_add(job: jobq.Job) -> dict:
    await asyncio.sleep(0.01)
    return {"sum": job.payload["a"] + job.payload["b"], "loop": id(asyncio.get_running_loop()), "pid": os.getpid()}


@jobq.register("async_sleep")
async def async_sleep(job: jobq.Job) -> dict:
    """Sleeps ``seconds``, saying how far it got; notes a cancel in ``mark``, and the end
    of a cleanup of ``cleanup`` seconds (default 0) that awaits after it."""
    try:
        jobq.progress(0.5, "half way", step=1)
        await asyncio.sleep(job.payload["seconds"])
    except asyncio.CancelledError:
        _note(job, "cancelled")
        await asyncio.sleep(job.payload.get("cleanup", 0))
        _note(job, "cleaned")
        raise
    return {"slept": job.payload["seconds"]}


@jobq.register("async_spin")
async def async_spin(job: jobq.Job) -> None:
    """CPU-bound, never awaits: only the kill after the grace ends it."""
    _note(job, "spinning")
    while True:
        pass


@jobq.register("async_hang", timeout=1)
async def async_hang(job: jobq.Job) -> None:
    await asyncio.sleep(60)


@jobq.register("async_snooze_once")
async def async_snooze_once(job: jobq.Job) -> dict:
    if job.snoozes == 0:
        raise jobq.Snooze(0.2)
    return {"snoozes": job.snoozes}


@jobq.register("async_fail", max_retries=0)
async def async_fail(job: jobq.Job) -> None:
    await asyncio.sleep(0)
    raise ValueError("async handler failed")
