"""OpenTelemetry across the queue: the trace of the code that enqueued a job goes on
into the worker that runs it (the ``otel`` extra: ``pip install 'jobq[otel]'``).

- :func:`producing`: a PRODUCER span around an enqueue (``send <queue>``); its W3C
  ``traceparent`` is what the inserts record on each job (``jobs.traceparent``,
  migration 0018: through the session setting ``jobq.traceparent``, :func:`recorded_on`,
  or given per job by the grouped ``POST /jobs``).
- :func:`processing`: a CONSUMER span per attempt (``process <queue>``), a child of the
  job's traceparent, with OpenTelemetry's messaging attributes (``messaging.system`` =
  ``jobq``, the destination its queue, operation ``process``, the job's id as the
  message id; the attempt and type as ``jobq.job.*``); a retry's span also links to its
  first attempt's span (kept in that run's errors entry); an exception the handler
  raised is recorded on it with an error status.
- :func:`continued`: an HTTP request's ``traceparent`` header as the parent of the
  producer spans of its enqueue (``POST /jobs``, ``POST /jobs/batch``).
- :func:`span`: an INTERNAL span around one of jobq's own steps (a claim, an outcome
  write), a child of whatever span is current.

Off, and free, where the ``opentelemetry`` package is not installed: nothing of it is
imported and every function here returns at once. Installed without a tracer provider
configured (``trace.set_tracer_provider``), each call costs a clock read and starts no
span (whether a provider was configured since is asked once a second). Worker processes are forked from the supervisor: configure the provider in a
handler module (JOBQ_HANDLERS, imported before the fork); the SDK's BatchSpanProcessor
starts its export thread again in each child, and :func:`flush` (called by a child
before it exits) exports what it holds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from jobq.job import Job
from jobq.store import session_settings
from jobq.store.connections import Connection
from jobq.store.session_settings import TRACEPARENT

SYSTEM = "jobq"
TRACER = "jobq"
# Without a tracer provider, whether one was configured since is asked again at most this
# often (OpenTelemetry's get_tracer_provider() reads the environment: 2 us a call).
RECHECK_SECONDS = 1.0


def _installed() -> bool:
    """Whether the opentelemetry package can be imported, without importing it."""
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken stub in sys.modules
        return False


AVAILABLE = _installed()

_api: Any = None  # opentelemetry.trace, imported at the first call that needs it
_propagate: Any = None  # opentelemetry.trace.propagation.tracecontext's propagator
_tracer_of_provider: Any = None  # jobq's tracer, once a provider is configured (for good: OpenTelemetry sets one once)
_recheck_at = 0.0  # monotonic time before which no provider is looked for again
# What each function returns where no span is made: reusable, entered for nothing (a
# worker calls processing() once per job: no generator made for it).
_OFF: AbstractContextManager[None] = contextlib.nullcontext()


def _tracer() -> Any:
    """jobq's tracer, or None where no span is to be made (no package, no provider; a
    provider configured later is found within RECHECK_SECONDS)."""
    global _api, _propagate, _tracer_of_provider, _recheck_at
    if _tracer_of_provider is not None or not AVAILABLE:
        return _tracer_of_provider
    now = time.monotonic()
    if now < _recheck_at:
        return None
    if _api is None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _api, _propagate = trace, TraceContextTextMapPropagator()
    provider = _api.get_tracer_provider()
    if isinstance(provider, (_api.ProxyTracerProvider, _api.NoOpTracerProvider)):
        _recheck_at = now + RECHECK_SECONDS
        return None
    _tracer_of_provider = provider.get_tracer(TRACER)
    return _tracer_of_provider


def producing(queue: str, jobs: int) -> AbstractContextManager[str | None]:
    """A PRODUCER span for an enqueue of ``jobs`` jobs to ``queue`` (a batch of several
    queues names the first); yields its traceparent for the rows, or None (no span)."""
    tracer = _tracer()
    return _OFF if tracer is None else _producing(tracer, queue, jobs)


@contextlib.contextmanager
def _producing(tracer: Any, queue: str, jobs: int) -> Iterator[str | None]:
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": queue,
    }
    if jobs > 1:
        attributes["messaging.batch.message_count"] = jobs
    with tracer.start_as_current_span(f"send {queue}", kind=_api.SpanKind.PRODUCER, attributes=attributes):
        carrier: dict[str, str] = {}
        _propagate.inject(carrier)
        yield carrier.get("traceparent")


def recorded_on(conn: Connection, queue: str, jobs: int) -> AbstractContextManager[None]:
    """:func:`producing`, with ``conn``'s session setting ``jobq.traceparent`` at the span
    for the block: every insert of jobs in it (INSERT, arrays, COPY, a schedule's) records
    it, as the column's default (migration 0018). Without a span, nothing is sent."""
    tracer = _tracer()
    return _OFF if tracer is None else _recorded_on(tracer, conn, queue, jobs)


@contextlib.contextmanager
def _recorded_on(tracer: Any, conn: Connection, queue: str, jobs: int) -> Iterator[None]:
    with _producing(tracer, queue, jobs) as traceparent, session_settings.setting(conn, TRACEPARENT, traceparent):
        yield


def continued(traceparent: str | None) -> AbstractContextManager[None]:
    """The block in the trace of ``traceparent`` (a W3C ``traceparent`` header an HTTP
    client sent), so that the producer spans made in it are children of the client's
    span; unchanged where a span is current already (an instrumented web framework
    extracted the header itself), or without a header or a provider."""
    if not traceparent or _tracer() is None or _api.get_current_span().get_span_context().is_valid:
        return _OFF
    return _continued(traceparent)


@contextlib.contextmanager
def _continued(traceparent: str) -> Iterator[None]:
    from opentelemetry import context

    token = context.attach(_propagate.extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        context.detach(token)


def processing(job: Job) -> AbstractContextManager[str | None]:
    """A CONSUMER span for this attempt of ``job``, a child of its traceparent; yields
    the span's own traceparent (None: no span), which a failed run keeps in its errors
    entry (``span``), so that a retry's span (attempt > 0) links to the first attempt's.
    """
    tracer = _tracer()
    return _OFF if tracer is None else _processing(tracer, job)


@contextlib.contextmanager
def _processing(tracer: Any, job: Job) -> Iterator[str | None]:
    parent = _propagate.extract({"traceparent": job.traceparent}) if job.traceparent else None
    first = next((entry.get("span") for entry in job.errors or () if entry.get("attempt") == 0), None)
    links = []
    if job.attempt > 0 and first:
        first_attempt = _api.get_current_span(_propagate.extract({"traceparent": first})).get_span_context()
        links.append(_api.Link(first_attempt, {"jobq.link": "first attempt"}))
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
        "jobq.job.type": job.type,
        "jobq.job.attempt": job.attempt,
    }
    with tracer.start_as_current_span(
        f"process {job.queue}", context=parent, kind=_api.SpanKind.CONSUMER, attributes=attributes, links=links
    ):
        carrier: dict[str, str] = {}
        _propagate.inject(carrier)
        yield carrier.get("traceparent")


def failed(exc: BaseException) -> None:
    """Record a handler's exception on the current span (the consumer span of
    :func:`processing`), with an error status. Nothing without a span."""
    if _api is None:
        return
    current = _api.get_current_span()
    if current.is_recording():
        current.record_exception(exc)
        current.set_status(_api.Status(_api.StatusCode.ERROR, type(exc).__name__))


def span(name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """An INTERNAL span ``name`` (``jobq claim``, ``jobq outcomes``) around the block."""
    tracer = _tracer()
    if tracer is None:
        return _OFF
    return tracer.start_as_current_span(name, attributes={"messaging.system": SYSTEM, **attributes})


def flush(timeout_millis: int = 5000) -> None:
    """Export what the provider holds (a forked child calls it before ``os._exit``, which
    runs no exit handler). Nothing without a provider."""
    trace = sys.modules.get("opentelemetry.trace")  # imported by the application, or by jobq
    if trace is None:
        return
    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is not None:
        force_flush(timeout_millis)
