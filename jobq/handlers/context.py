"""The job this process is running, as its handler sees it: ``jobq.progress`` and
``jobq.cancel_requested``.

A worker process runs one handler at a time; :func:`begin` and :func:`end` bracket
it. What the handler says here stays in memory (no round trip per call): the
worker's heartbeat thread writes the latest progress to the job's row within
PROGRESS_EVERY seconds, also while a CPU-bound handler holds the interpreter (pure
Python gives it up every few milliseconds). A cancel of the running job sets the flag
that :func:`cancel_requested` reads, and the worker raises :class:`jobq.Cancelled`
in the handler.

Every write here is one assignment of an immutable value, so that the worker's
signal handler and heartbeat thread can read and write it without a lock (a lock
taken by the handler could never be taken by a signal handler running on top of it).
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
class _Run:
    job_id: int
    cancel_requested: bool = False
    progress: Progress | None = None
    calls: int = 0


_current: _Run | None = None
_cancelled: set[int] = set()  # jobs cancelled since the worker's batch was claimed


def begin(job_id: int) -> None:
    """The worker enters the handler of ``job_id`` (one already cancelled starts with
    :func:`cancel_requested` true: the worker does not call its handler)."""
    global _current
    _current = _Run(job_id)
    if job_id in _cancelled:  # after the assignment: a cancel arriving now sees _current
        _current.cancel_requested = True


def end() -> None:
    """The handler returned (or raised): nothing here is about it any more."""
    global _current
    _current = None


def running_job() -> int | None:
    """The id of the job whose handler runs now, if any."""
    run = _current
    return run.job_id if run is not None else None


def request_cancel(job_id: int) -> bool:
    """``job_id`` was cancelled: remember it, and mark the run if it is the running job;
    True if its handler runs now (the caller raises :class:`jobq.Cancelled` in it)."""
    _cancelled.add(job_id)
    run = _current
    if run is None or run.job_id != job_id:
        return False
    run.cancel_requested = True
    return True


def cancels_pending() -> bool:
    """Whether any cancel arrived since :func:`forget_cancels`."""
    return bool(_cancelled)


def was_cancelled(job_id: int) -> bool:
    """Whether a cancel of ``job_id`` arrived since :func:`forget_cancels`."""
    return job_id in _cancelled


def forget_cancels() -> None:
    """The batch is over: its cancels are of no more use (new claims never take a
    cancelled job)."""
    _cancelled.clear()


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


def latest_progress() -> Progress | None:
    """The running job's latest progress (for the heartbeat to write), if any."""
    run = _current
    return run.progress if run is not None else None
