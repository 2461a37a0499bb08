"""The job this process is running, as its handler sees it: ``jobq.progress`` and
``jobq.cancel_requested``.

Whoever runs a job makes its :class:`Run` (a worker: its jobs in flight,
:mod:`jobq.daemon.worker.flight`, when the job starts), and :func:`begin` and
:func:`end` install it here while the handler runs (a handler calls ``jobq.progress()``
with no reference to anything: this module is how it finds its run). The Run is not a
copy: a cancel sets the flag that :func:`cancel_requested` reads on the Run itself, and
the worker raises :class:`jobq.Cancelled` in the handler; the worker's heartbeat thread
reads the latest progress from it and writes it to the job's row within PROGRESS_EVERY
seconds, also while a CPU-bound handler holds the interpreter (pure Python gives it up
every few milliseconds). What the handler says stays in memory: no round trip per call.

Every write here is one assignment, so that the worker's signal handler and heartbeat
thread can read and write without a lock (a lock taken by the handler could never be
taken by a signal handler running on top of it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from jobq.errors import InvalidArgument
from jobq.spec import storable_json

PROGRESS_EVERY = 0.5  # seconds between two writes of a running job's progress
MAX_MESSAGE_LENGTH = 1000
MAX_PROGRESS_BYTES = 8_192  # of the JSON of data


@dataclass(frozen=True, slots=True)
class Progress:
    job_id: int
    json: str  # {"fraction", "message", "data", "at"} as stored
    serial: int  # grows with every call, so that a writer knows what it has written


@dataclass(slots=True)
class Run:
    """One run of a job's handler, as the handler sees it."""

    job_id: int
    cancel_requested: bool = False  # set by whoever heard the cancel; read by the handler
    # Why the worker stopped the run, its job no longer its own (lease taken, connection
    # dead): set with cancel_requested, the run is a failed one with this reason, not a cancel.
    stopped: str | None = None
    # Cancelled was raised in its handler (or its task cancelled): never a second time, so
    # that the handler's cleanup (a finally, an except) runs to its end within the grace.
    interrupted: bool = False
    progress: Progress | None = None  # the handler's latest call of jobq.progress
    calls: int = 0
    workflow_id: int | None = None  # the workflow whose step this is (jobq.spawn adds to it)
    spawned: list[dict[str, Any]] | None = None  # the jobs its handler spawned, written with its success


_current: Run | None = None


def begin(run: Run) -> None:
    """The handler of ``run`` starts (one whose cancel was already requested starts with
    :func:`cancel_requested` true: its handler is not called)."""
    global _current
    _current = run


def end() -> None:
    """The handler returned (or raised): nothing here is about it any more."""
    global _current
    _current = None


def current() -> Run | None:
    """The run whose handler runs now, if any."""
    return _current


def cancel_requested() -> bool:
    """True inside a handler whose job was cancelled while it ran: return (or raise)
    soon; its outcome is not recorded, the job ends ``cancelled``. False outside a
    handler."""
    run = _current
    return run is not None and run.cancel_requested


def progress(fraction: float | None = None, message: str | None = None, **data: Any) -> None:
    """Tell how far the running job has got: ``fraction`` (0 to 1), a ``message``, and
    any JSON ``data``. Cheap (no database round trip): the latest call is shown as the
    job's ``progress`` within about a second. Outside a handler it does nothing.

    Raises :class:`jobq.InvalidArgument` for a fraction outside 0..1, a message that
    is not a string or is longer than 1,000 characters, or data that is not storable
    JSON (or longer than 8 KiB).
    """
    run = _current
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1 or math.isnan(fraction):
            raise InvalidArgument("fraction", "must be a number from 0 to 1")
        fraction = float(fraction)
    if message is not None and (not isinstance(message, str) or len(message) > MAX_MESSAGE_LENGTH):
        raise InvalidArgument("message", f"must be a string of at most {MAX_MESSAGE_LENGTH} characters")
    try:
        data_json = storable_json(data)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument("data", f"must be storable JSON: {exc}") from None
    if len(data_json) > MAX_PROGRESS_BYTES:
        raise InvalidArgument("data", f"must be at most {MAX_PROGRESS_BYTES} bytes of JSON")
    if run is None:
        return
    at = datetime.now(timezone.utc).isoformat()
    value = {"fraction": fraction, "message": message, "data": data, "at": at}
    run.calls += 1
    run.progress = Progress(run.job_id, storable_json(value), run.calls)
