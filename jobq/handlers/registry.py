"""The handler registry: job type name -> function, with its own timeout and retries.

Handler modules register with ``@jobq.register("name")`` when imported; workers
import the built-ins and every module named in ``JOBQ_HANDLERS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jobq.errors import InvalidArgument
from jobq.job import Job

HandlerFunc = Callable[[Job], Any]

BUILTIN_MODULE = "jobq.handlers.builtin"


@dataclass(frozen=True)
class Handler:
    """A registered job type. ``timeout`` and ``max_retries``, when set, replace the
    worker's ``JOBQ_JOB_TIMEOUT`` and the job row's ``max_retries``."""

    name: str
    func: HandlerFunc
    timeout: float | None = None
    max_retries: int | None = None


_handlers: dict[str, Handler] = {}


def register(
    name: str, timeout: float | None = None, max_retries: int | None = None
) -> Callable[[HandlerFunc], HandlerFunc]:
    """Decorator: run the function for jobs of type ``name``.

    The function is called with the :class:`Job` and returns a JSON-serialisable
    result; raising an exception fails the run (retried by policy). Registering a
    name again replaces the earlier handler (a module re-imported after HUP). Marks the
    function with ``name`` (``__jobq_type__``), which ``@jobq.periodic`` above it reads.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgument("name", "must be a non-empty string")
    if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
        raise InvalidArgument("timeout", "must be a positive number of seconds")
    if max_retries is not None and (isinstance(max_retries, bool) or not 0 <= max_retries <= 10):
        raise InvalidArgument("max_retries", "must be an integer from 0 to 10")

    def decorate(func: HandlerFunc) -> HandlerFunc:
        _handlers[name] = Handler(name, func, float(timeout) if timeout else None, max_retries)
        try:
            func.__jobq_type__ = name  # type: ignore[attr-defined]  # what @jobq.periodic above reads
        except (AttributeError, TypeError):
            pass  # a callable that takes no attributes (a bound method): periodic needs type=
        return func

    return decorate


def find(name: str) -> Handler | None:
    """The handler registered for a job type, None when there is none."""
    return _handlers.get(name)


def load(modules: Iterable[str]) -> None:
    """Import the built-in handlers and ``modules`` so that they register.

    Workers call this after the fork, so a worker started after HUP runs the code on
    disk now. ImportError and any error raised by a module propagate: a worker that
    cannot load its handlers must not start.
    """
    for module_name in (BUILTIN_MODULE, *modules):
        importlib.import_module(module_name)
