"""Running one job's handler: the one place where handler exceptions are caught."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from jobq.handlers import context, coroutines, tracebacks
from jobq.observe import tracing
from jobq.errors import BadPayload, Cancelled, Snooze, UnknownJobType
from jobq.handlers.registry import Handler
from jobq.job import Job
from jobq.spec import storable_json

MAX_ERROR_LENGTH = 16_000  # characters of traceback kept in the row: the end, where the cause is

log = logging.getLogger(__name__)


@dataclass(slots=True)  # not frozen: one a job, and a frozen dataclass is made 5 times slower
class RunResult:
    """What a run produced: JSON text of the result, or an error message; and how long
    the handler ran."""

    result_json: str | None
    error: str | None
    seconds: float
    error_kind: str | None = None  # the exception's class: what logs show (never its message)
    cancelled: bool = False  # the job was cancelled while it ran: nothing is to be written
    not_retried: str | None = None  # why the handler's retry policy sends it to the dead letters now
    snooze: float | None = None  # the handler raised jobq.Snooze: pending again after these seconds
    span: str | None = None  # the traceparent of the run's OpenTelemetry span, when traced

    @property
    def ok(self) -> bool:
        return self.error is None and self.snooze is None


# Called with each failed run's job, handler, exception and result, in the worker, right
# after the handler raised (jobq.contrib.sentry registers one). A hook that raises is
# logged and skipped: it never changes the run's outcome.
FailureHook = Callable[[Job, "Handler | None", Exception, "RunResult"], None]
_failure_hooks: list[FailureHook] = []


def on_failure(hook: FailureHook) -> None:
    """Call ``hook`` for every failed run from now on (in this process and the workers it
    forks); a hook already registered is not added twice."""
    if hook not in _failure_hooks:
        _failure_hooks.append(hook)


def run(job: Job, handler: Handler | None, view: context.Run | None = None) -> RunResult:
    """Call ``handler`` (the one registered for ``job.type``) with ``job`` and capture
    what happened; ``view`` is the handler's view of this run (:mod:`jobq.handlers.context`;
    a worker's is made when the job starts, a fresh one by default), installed while it runs.

    Never raises for anything the handler does (except BaseExceptions such as
    KeyboardInterrupt and SystemExit, which must stop the worker). No handler (an
    unknown type) or a result that is not storable JSON is a failed run like any other.
    An ``async def`` handler runs on the process's event loop
    (:mod:`jobq.handlers.coroutines`), where a cancel cancels its task.
    A run whose job was cancelled meanwhile (its view's flag; the handler got
    :class:`Cancelled` or :class:`asyncio.CancelledError`, or caught it, or returned
    anyway) is ``cancelled``, whatever it
    returned. A run the worker stopped (its view's ``stopped``: the job is no longer its
    own) is a failed run saying why, whatever it returned: the lease, if still its own,
    records it as one. With OpenTelemetry, the run is a consumer span
    (:mod:`jobq.observe.tracing`).
    """
    with tracing.processing(job) as span:
        result = _run(job, handler, view)
    return result if span is None else replace(result, span=span)


def _run(job: Job, handler: Handler | None, view: context.Run | None) -> RunResult:
    """:func:`run`, inside its consumer span."""
    started = time.monotonic()
    cancelled = False
    view = view or context.Run(job.id)
    try:
        if handler is None:
            raise UnknownJobType(job.type)
        view.workflow_id = job.workflow_id
        context.begin(view)
        try:
            if context.cancel_requested():  # cancelled between its claim and now
                view.interrupted = True
                raise Cancelled()
            value = handler.func(job)
            if inspect.iscoroutine(value):  # an async def handler: run on this process's loop
                value = coroutines.run(value)
        finally:
            # From here on the worker's signal handler no longer raises Cancelled; one
            # that did before this line lands in the except below, like one in the handler.
            cancelled = context.cancel_requested()
            context.end()
        if cancelled:
            return _cancelled(view, started)
        try:
            result_json = storable_json(value if not view.spawned else {SPAWN: view.spawned, RESULT: value})
        except (TypeError, ValueError) as exc:
            raise TypeError(f"handler {job.type!r} returned a result that is not storable JSON: {exc}") from None
        return RunResult(result_json, None, time.monotonic() - started)
    except Snooze as snooze:
        return RunResult(None, None, time.monotonic() - started, snooze=snooze.seconds)
    except Cancelled:
        return _cancelled(view, started)
    except Exception as exc:
        tracing.failed(exc)
        if cancelled:  # an error the cancel caused, e.g. in the handler's cleanup
            return _cancelled(view, started)
        # A payload the handler refused, or no handler at all: the message says it all.
        error = str(exc) if isinstance(exc, (UnknownJobType, BadPayload)) else _clip(tracebacks.format_current())
        not_retried = handler.not_retried(exc) if handler is not None else None
        if not_retried is not None:
            error = f"not retried: {not_retried}\n{error}"
        failed = RunResult(None, error, time.monotonic() - started, type(exc).__name__, not_retried=not_retried)
        _tell_hooks(job, handler, exc, failed)
        return failed


def _tell_hooks(job: Job, handler: Handler | None, exc: Exception, result: RunResult) -> None:
    for hook in _failure_hooks:
        try:
            hook(job, handler, exc, result)
        except Exception:
            log.exception("job.failure_hook_failed id=%s type=%s hook=%s", job.id, job.type, getattr(hook, "__name__", hook))


# The envelope of a step's result that carries the jobs it spawned (jobq.spawn), which
# the outcome statement's trigger (migration 0015) unwraps as it writes them.
SPAWN, RESULT = "jobq:spawn", "jobq:result"


def _cancelled(view: context.Run, started: float) -> RunResult:
    """A run ended by a cancel: an operator's (nothing to write but the cancel), or the
    worker's own stop of a job no longer its own (a failed run, saying why)."""
    seconds = time.monotonic() - started
    if view.stopped is not None:
        return RunResult(None, f"stopped by its worker: {view.stopped}", seconds, "Stopped")
    return RunResult(None, None, seconds, cancelled=True)


def _clip(text: str) -> str:
    text = text.strip()
    if len(text) <= MAX_ERROR_LENGTH:
        return text
    return "...\n" + text[-MAX_ERROR_LENGTH:]
