"""``async def`` handlers: the event loop a process keeps for them, and how a cancel
reaches one.

A handler may be a coroutine function. Whoever runs a job (a worker, ``jobq_drain``)
calls it as any handler; :mod:`jobq.handlers.execution` hands the coroutine it returns
to :func:`run`, which runs it to the end on this process's event loop (made on first
use, after any fork: one per process, kept between jobs, so that a handler's
``asyncio`` state such as a client session may outlive one job). One job at a time, as
for sync handlers: the loop runs only while a handler does.

A cancel reaches an async handler as asyncio expects. The worker's own signal handler
(SIGUSR1, :meth:`jobq.daemon.worker.loop.WorkerLoop.handle_control`) stays installed
while a coroutine runs; when it finds the running job is to stop, it calls
:func:`cancel_running`, which has the loop cancel the handler's task (through the
loop's self-pipe, so a loop asleep in its selector wakes), and the handler sees
:class:`asyncio.CancelledError` at its next ``await`` (a sync handler sees
:class:`jobq.Cancelled`, raised in its frame by that same signal handler). A run whose
task ended cancelled is a cancelled run (:class:`jobq.Cancelled` for the caller). A
coroutine that never awaits is not interrupted: the worker is killed after
JOBQ_CANCEL_GRACE, as for a sync handler that ignores its cancel. (Until 6 December
2026 the loop took the signal over for each run, ``loop.add_signal_handler`` and back:
189 us a run, and a drain of ``async def`` noop handlers went at a quarter of the sync
ones' rate.)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any

from jobq.errors import Cancelled

_loop: asyncio.AbstractEventLoop | None = None
_loop_pid: int | None = None
_running: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None  # the handler's task, while it runs


def event_loop() -> asyncio.AbstractEventLoop:
    """This process's loop for handlers: a forked child makes its own."""
    global _loop, _loop_pid
    if _loop is None or _loop.is_closed() or _loop_pid != os.getpid():
        _loop, _loop_pid = asyncio.new_event_loop(), os.getpid()
    return _loop


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run an async handler's coroutine to its end on this process's loop and return its
    value. Raises what the handler raised, and :class:`jobq.Cancelled` if its task was
    cancelled (:func:`cancel_running`, or the handler cancelled itself)."""
    global _running
    loop = event_loop()
    task = loop.create_task(coro)
    _running = (loop, task)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        raise Cancelled() from None
    finally:
        _running = None


def cancel_running() -> bool:
    """Have the loop cancel the async handler's task running now (it sees
    :class:`asyncio.CancelledError` at its next ``await``); False when no coroutine runs.
    Safe from a signal handler of the thread that runs the loop: it only queues the
    cancel and writes to the loop's self-pipe."""
    running = _running
    if running is None:
        return False
    loop, task = running
    loop.call_soon_threadsafe(task.cancel)
    return True
