"""``async def`` handlers: the event loop a process keeps for them, and how a cancel
reaches one.

A handler may be a coroutine function. Whoever runs a job (a worker, ``jobq_drain``)
calls it as any handler; :mod:`jobq.handlers.execution` hands the coroutine it returns
to :func:`run`, which runs it to the end on this process's event loop (made on first
use, after any fork: one per process, kept between jobs, so that a handler's
``asyncio`` state such as a client session may outlive one job). One job at a time, as
for sync handlers: the loop runs only while a handler does.

A cancel reaches an async handler as asyncio expects. A worker names its cancel signal
(:func:`cancel_on`: SIGUSR1, and the check that says whether the signal is a cancel of
the running job); while a coroutine runs, that signal is handled by the loop
(``loop.add_signal_handler``), which cancels the handler's task, so the handler sees
:class:`asyncio.CancelledError` at its next ``await`` (a sync handler sees
:class:`jobq.Cancelled`, raised in its frame by the worker's own signal handler). A run
whose task ended cancelled is a cancelled run (:class:`jobq.Cancelled` for the caller).
A coroutine that never awaits is not interrupted: the worker is killed after
JOBQ_CANCEL_GRACE, as for a sync handler that ignores its cancel.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from jobq.errors import Cancelled

_loop: asyncio.AbstractEventLoop | None = None
_loop_pid: int | None = None
_cancel: tuple[int, Callable[[], bool]] | None = None


def cancel_on(signum: int, is_cancel: Callable[[], bool]) -> None:
    """While a coroutine runs in this process, ``signum`` is handled by the loop: it calls
    ``is_cancel()`` (in the loop, not in a signal frame) and cancels the handler's task
    when that says the running job is to stop. Call from the main thread of the process
    that runs handlers (a worker, at boot)."""
    global _cancel
    _cancel = (signum, is_cancel)


def event_loop() -> asyncio.AbstractEventLoop:
    """This process's loop for handlers: a forked child makes its own."""
    global _loop, _loop_pid
    if _loop is None or _loop.is_closed() or _loop_pid != os.getpid():
        _loop, _loop_pid = asyncio.new_event_loop(), os.getpid()
    return _loop


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run an async handler's coroutine to its end on this process's loop and return its
    value. Raises what the handler raised, and :class:`jobq.Cancelled` if its task was
    cancelled (a cancel signal, or the handler cancelled itself)."""
    loop = event_loop()
    restore = _handle_cancel_signal(loop)
    try:
        task = loop.create_task(coro)
        if restore is not None:
            restore.task = task
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        raise Cancelled() from None
    finally:
        if restore is not None:
            restore()


class _SignalSwap:
    """The cancel signal given to the loop for one run, and given back after it: the
    process's own handler and wake-up fd (the loop needs the fd for its own)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, signum: int, is_cancel: Callable[[], bool]) -> None:
        self.loop, self.signum, self.is_cancel = loop, signum, is_cancel
        self.task: asyncio.Task[Any] | None = None
        self.handler = signal.getsignal(signum)
        self.wakeup_fd = signal.set_wakeup_fd(-1)
        loop.add_signal_handler(signum, self._heard)

    def _heard(self) -> None:
        if self.is_cancel() and self.task is not None:
            self.task.cancel()

    def __call__(self) -> None:
        self.loop.remove_signal_handler(self.signum)
        signal.signal(self.signum, self.handler)
        signal.set_wakeup_fd(self.wakeup_fd)
        if self.wakeup_fd >= 0:
            try:  # a signal that came during the run wrote into the loop's fd: look again
                os.write(self.wakeup_fd, b"\0")
            except OSError:
                pass


def _handle_cancel_signal(loop: asyncio.AbstractEventLoop) -> _SignalSwap | None:
    """The cancel signal given to ``loop`` for a run, if one was named; only the main
    thread may handle signals (a drain in another thread runs without)."""
    if _cancel is None or threading.current_thread() is not threading.main_thread():
        return None
    return _SignalSwap(loop, *_cancel)
