"""The handler registry: job type name -> function, with its own timeout, retries and
retry policy (backoff, which exceptions are retried and which are not).

Handler modules register with ``@jobq.register("name")`` when imported; workers
import the built-ins and every module named in ``JOBQ_HANDLERS``.
"""

from __future__ import annotations

import importlib
import os
import sys
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jobq.errors import InvalidArgument
from jobq.job import Job
from jobq.spec import MAX_MAX_RETRIES

HandlerFunc = Callable[[Job], Any]
Backoff = float | Callable[[int], float]
Exceptions = tuple[type[BaseException], ...]

BUILTIN_MODULE = "jobq.handlers.builtin"


@dataclass(frozen=True)
class Handler:
    """A registered job type. ``timeout`` and ``max_retries``, when set, replace the
    worker's ``JOBQ_JOB_TIMEOUT`` and the job row's ``max_retries``; ``backoff`` the
    global delay before a retry; ``retry_on`` and ``discard_on`` say which of the
    handler's exceptions are not worth a retry."""

    name: str
    func: HandlerFunc
    timeout: float | None = None
    max_retries: int | None = None
    backoff: Backoff | None = None
    retry_on: Exceptions | None = None
    discard_on: Exceptions = ()

    def not_retried(self, exc: BaseException) -> str | None:
        """Why a run that raised ``exc`` goes to the dead-letter table at once (None: it
        is retried by policy): its class is in ``discard_on``, or ``retry_on`` is given
        and it is not in it."""
        kind = type(exc).__name__
        if self.discard_on and isinstance(exc, self.discard_on):
            return f"{kind} is in discard_on of {self.name!r}"
        if self.retry_on is not None and not isinstance(exc, self.retry_on):
            return f"{kind} is not in retry_on of {self.name!r}"
        return None

    def retry_delay(self, attempt: int) -> float | None:
        """Seconds before the run after failed run ``attempt`` by this handler's
        ``backoff``; None for the global policy (no backoff, or a callable that raised
        or did not return a non-negative number: the caller logs it)."""
        if self.backoff is None:
            return None
        try:
            delay = self.backoff(attempt) if callable(self.backoff) else self.backoff
        except Exception:
            return None
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay < 0:
            return None
        return float(delay)


_handlers: dict[str, Handler] = {}


def register(
    name: str,
    timeout: float | None = None,
    max_retries: int | None = None,
    *,
    backoff: Backoff | None = None,
    retry_on: type[BaseException] | Exceptions | None = None,
    discard_on: type[BaseException] | Exceptions = (),
) -> Callable[[HandlerFunc], HandlerFunc]:
    """Decorator: run the function for jobs of type ``name``.

    The function is called with the :class:`Job` and returns a JSON-serialisable
    result; raising an exception fails the run (retried by policy). Registering a
    name again replaces the earlier handler (a module re-imported after HUP). Marks the
    function with ``name`` (``__jobq_type__``), which ``@jobq.periodic`` above it reads.

    The retry policy governs the exceptions the handler raises: ``backoff`` (seconds,
    or a function of the 0-based attempt that returns them) replaces the global
    exponential delay; an exception in ``discard_on``, or not in ``retry_on`` when that
    is given, sends the job to the dead-letter table at once, with the reason. Timeouts,
    crashes and reclaims are settled by processes that do not import handler modules:
    they keep the global policy. Raises :class:`InvalidArgument` naming a bad argument.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgument("name", "must be a non-empty string")
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise InvalidArgument("timeout", "must be a positive number of seconds")
    if max_retries is not None and (isinstance(max_retries, bool) or not 0 <= max_retries <= MAX_MAX_RETRIES):
        raise InvalidArgument("max_retries", f"must be an integer from 0 to {MAX_MAX_RETRIES}")
    if backoff is not None and not callable(backoff) and (
        isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or not 0 <= backoff < math.inf
    ):
        raise InvalidArgument("backoff", "must be a non-negative number of seconds, or a function of the attempt")
    retried = None if retry_on is None else _exceptions("retry_on", retry_on)
    discarded = _exceptions("discard_on", discard_on)

    def decorate(func: HandlerFunc) -> HandlerFunc:
        _handlers[name] = Handler(
            name, func, float(timeout) if timeout else None, max_retries, backoff, retried, discarded
        )
        try:
            func.__jobq_type__ = name  # type: ignore[attr-defined]  # what @jobq.periodic above reads
        except (AttributeError, TypeError):
            pass  # a callable that takes no attributes (a bound method): periodic needs type=
        return func

    return decorate


def _exceptions(field: str, value: object) -> Exceptions:
    """An exception class or a tuple of them, as a tuple; InvalidArgument otherwise."""
    classes = value if isinstance(value, tuple) else (value,)
    if not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
        raise InvalidArgument(field, "must be an exception class or a tuple of them")
    return classes  # type: ignore[return-value]


def names() -> list[str]:
    """The job types with a handler in this process, sorted (what a worker announces)."""
    return sorted(_handlers)


def find(name: str) -> Handler | None:
    """The handler registered for a job type, None when there is none."""
    return _handlers.get(name)


def load(modules: Iterable[str]) -> None:
    """Import the built-in handlers and ``modules`` so that they register.

    ``modules`` are found as ``python -m`` finds them: from the current directory first,
    then ``sys.path`` (the current directory is added to it when missing, which it is
    for a console script such as ``jobq``). Workers call this after the fork, so a
    worker started after HUP runs the code on disk now. Any error raised by a module
    propagates; a module not found raises ImportError naming it and the directory
    searched: a worker that cannot load its handlers must not start.
    """
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    for module_name in (BUILTIN_MODULE, *modules):
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
                raise  # the module was found; something it imports was not
            raise ModuleNotFoundError(
                f"JOBQ_HANDLERS: no module named {exc.name!r} in the current directory ({here}) "
                "or on PYTHONPATH / sys.path (run the worker from your project's root, or set PYTHONPATH)",
                name=exc.name,
            ) from None
